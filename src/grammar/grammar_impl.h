#pragma once
// The xgrammar objects behind grammar.h's pimpls (only src/grammar/*.cc include this).
#include <xgrammar/xgrammar.h>

#include <string>

#include "grammar/grammar.h"

namespace fuselm::grammar {

struct Grammar::Impl {
  xgrammar::Grammar g;
  std::string key;
};

class CompiledGrammar {
 public:
  explicit CompiledGrammar(xgrammar::CompiledGrammar c) : compiled(std::move(c)) {}
  xgrammar::CompiledGrammar compiled;
};

/// xgrammar's message without the "[hh:mm:ss] /path/file.cc:123: " its checks put first (no
/// server paths in errors), first line only.
inline std::string clean_message(std::string msg) {
  if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  if (!msg.empty() && msg[0] == '[') {
    if (auto cc = msg.find(".cc:"); cc != std::string::npos) {
      if (auto colon = msg.find(": ", cc + 4); colon != std::string::npos) msg.erase(0, colon + 2);
    }
  }
  return msg;
}

/// Runs `f`, turning xgrammar's exceptions (std::runtime_error subclasses) into GrammarError with
/// `what` as the prefix and the cleaned message.
template <typename F>
auto guarded(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const GrammarError&) {
    throw;
  } catch (const std::exception& e) {
    throw GrammarError(what + ": " + clean_message(e.what()));
  }
}

}  // namespace fuselm::grammar
