// Compiler and Matcher: grammar.h's vocabulary-bound half, on xgrammar's GrammarCompiler and
// GrammarMatcher.
#include <dlpack/dlpack.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"

namespace fuselm::grammar {
namespace {

// Compiled grammars kept per compiler; past this many the cache starts over (a server sees few
// distinct schemas; this bounds what many distinct ones can hold).
constexpr size_t kMaxCached = 256;

xgrammar::TokenizerInfo make_info(const Vocabulary& v) {
  if (v.token_bytes.empty() || v.size < static_cast<int32_t>(v.token_bytes.size()))
    throw GrammarError("grammar vocabulary: no tokens, or a logits width below the tokenizer's size");
  return guarded("grammar vocabulary", [&] {
    return xgrammar::TokenizerInfo(v.token_bytes, xgrammar::VocabType::RAW, v.size,
                                   std::vector<int32_t>(v.stop_ids.begin(), v.stop_ids.end()), false);
  });
}

/// A DLTensor view of one int32 bitmask row.
DLTensor bitmask_tensor(std::span<int32_t> mask, int64_t& shape) {
  shape = static_cast<int64_t>(mask.size());
  DLTensor t{};
  t.data = mask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = &shape;
  return t;
}

/// A grammar whose first step allows no token and that is not already complete matches nothing
/// this vocabulary can write (e.g. {"$ref": "#"}): refused here rather than failing mid-request.
void check_not_empty(const std::shared_ptr<const CompiledGrammar>& compiled, int32_t size) {
  xgrammar::GrammarMatcher m(compiled->compiled);
  std::vector<int32_t> mask(static_cast<size_t>((size + 31) / 32));
  int64_t shape = 0;
  DLTensor t = bitmask_tensor(mask, shape);
  m.FillNextTokenBitmask(&t);
  if (std::all_of(mask.begin(), mask.end(), [](int32_t w) { return w == 0; }) && !m.IsCompleted())
    throw GrammarError("grammar: it matches no output (nothing can be generated from its start)");
}

}  // namespace

struct Compiler::Impl {
  explicit Impl(const Vocabulary& v, int threads)
      : info(make_info(v)), compiler(info, threads, /*cache_enabled=*/false), size(v.size) {}
  xgrammar::TokenizerInfo info;
  xgrammar::GrammarCompiler compiler;
  int32_t size;
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const CompiledGrammar>> cache;
};

Compiler::Compiler(const Vocabulary& vocab, int threads) : impl_(std::make_unique<Impl>(vocab, threads)) {}
Compiler::~Compiler() = default;

std::shared_ptr<const CompiledGrammar> Compiler::compile(const Grammar& g) {
  {
    std::lock_guard lock(impl_->mu);
    if (auto it = impl_->cache.find(g.key()); it != impl_->cache.end()) return it->second;
  }
  // Compiled outside the lock: two requests with one new grammar may both compile it (harmless).
  auto compiled = std::make_shared<const CompiledGrammar>(
      guarded("grammar", [&] { return impl_->compiler.CompileGrammar(g.impl().g); }));
  check_not_empty(compiled, impl_->size);
  std::lock_guard lock(impl_->mu);
  if (impl_->cache.size() >= kMaxCached) impl_->cache.clear();
  impl_->cache.emplace(g.key(), compiled);
  return compiled;
}

int32_t Compiler::vocab_size() const { return impl_->size; }

int32_t bitmask_words(int32_t vocab_size) { return (vocab_size + 31) / 32; }

struct Matcher::Impl {
  explicit Impl(std::shared_ptr<const CompiledGrammar> c)
      : compiled(std::move(c)),
        matcher(compiled->compiled),
        size(compiled->compiled.GetTokenizerInfo().GetVocabSize()) {}
  std::shared_ptr<const CompiledGrammar> compiled;  // kept alive for the matcher
  xgrammar::GrammarMatcher matcher;
  int32_t size;
};

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> compiled) : impl_(std::make_unique<Impl>(std::move(compiled))) {}
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

void Matcher::fill_bitmask(std::span<int32_t> mask) {
  if (static_cast<int32_t>(mask.size()) != bitmask_words(impl_->size))
    throw std::invalid_argument("Matcher::fill_bitmask: mask has the wrong number of words");
  int64_t shape = 0;
  DLTensor t = bitmask_tensor(mask, shape);
  impl_->matcher.FillNextTokenBitmask(&t);
}

void Matcher::mask_logits(std::span<float> logits, std::vector<int32_t>& scratch) {
  if (static_cast<int32_t>(logits.size()) != impl_->size)
    throw std::invalid_argument("Matcher::mask_logits: logits width differs from the grammar's vocabulary");
  scratch.resize(static_cast<size_t>(bitmask_words(impl_->size)));
  fill_bitmask(scratch);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  for (size_t w = 0; w < scratch.size(); ++w) {
    const auto bits = static_cast<uint32_t>(scratch[w]);
    if (bits == 0xFFFFFFFFu) continue;
    const size_t end = std::min(n, w * 32 + 32);
    if (bits == 0) {
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(w * 32), logits.begin() + static_cast<std::ptrdiff_t>(end), kNegInf);
      continue;
    }
    for (uint32_t off = ~bits; off != 0; off &= off - 1) {  // each disallowed id of the word
      const size_t i = w * 32 + static_cast<size_t>(std::countr_zero(off));
      if (i < end) logits[i] = kNegInf;
    }
  }
}

bool Matcher::accept(int32_t token) {
  if (token < 0 || token >= impl_->size) return false;
  return impl_->matcher.AcceptToken(token);
}

bool Matcher::terminated() const { return impl_->matcher.IsTerminated(); }
bool Matcher::completed() const { return impl_->matcher.IsCompleted(); }
int32_t Matcher::vocab_size() const { return impl_->size; }

}  // namespace fuselm::grammar
