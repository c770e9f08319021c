#include "server/chat_output_parser.h"

#include <random>

#include "template/json_scan.h"

namespace fuselm::server {

/// Result of matching from a position: matched (end), needs more text, or does not match.
struct detail::Match {
  enum Status { ok, need, fail } status;
  size_t end = 0;
};

namespace {

using detail::Match;

// JSON text of a value built from generated text: a model may emit bytes that are not UTF-8 (a
// byte-fallback token, a sequence cut short), which are written as U+FFFD rather than thrown on
// (agent_fuzz found the throw).
std::string json_text(const nlohmann::json& v) { return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

using tmpl::ToolFormat;
using tmpl::trim;

bool space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_space(std::string_view s, size_t at) {
  while (at < s.size() && space(s[at])) ++at;
  return at;
}

/// The length of the longest suffix of `s` that is a proper prefix of `marker` (text to hold
/// back: the marker may be completed by the next piece).
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - (marker.empty() ? 0 : 1)); n > 0; --n)
    if (marker.starts_with(s.substr(s.size() - n))) return n;
  return 0;
}

/// Matches `pieces` one after the other from `at`, each with its whitespace trimmed and any
/// whitespace before it skipped. At the end of the text (`final`) a partial match fails.
Match match_seq(std::string_view s, size_t at, std::initializer_list<std::string_view> pieces, bool final) {
  for (std::string_view piece : pieces) {
    const std::string_view t = trim(piece);
    if (t.empty()) continue;
    at = skip_space(s, at);
    const std::string_view rest = s.substr(at);
    if (rest.size() < t.size()) return {t.starts_with(rest) && !final ? Match::need : Match::fail, at};
    if (!rest.starts_with(t)) return {Match::fail, at};
    at += t.size();
  }
  return {Match::ok, at};
}

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

/// Nine alphanumerics: the id form every template accepts back (some refuse any other length).
std::string new_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id(9, ' ');
  for (auto& c : id) c = kAlnum[rng() % (sizeof kAlnum - 1)];
  return id;
}

struct CallParse {
  Match::Status status;
  size_t end = 0;
  ParsedToolCall call;
};

/// A JSON object at `at` (after whitespace): its end, or need/fail.
Match json_object_at(std::string_view s, size_t at, bool final) {
  at = skip_space(s, at);
  if (at >= s.size()) return {final ? Match::fail : Match::need, at};
  if (s[at] != '{') return {Match::fail, at};
  const size_t end = tmpl::json_value_end(s, at);
  if (end == std::string_view::npos) return {final ? Match::fail : Match::need, at};
  return {Match::ok, end};
}

/// The name written as text from `at`: ends at the first character a name cannot hold.
Match name_at(std::string_view s, size_t at, bool final) {
  at = skip_space(s, at);
  size_t e = at;
  while (e < s.size() && name_char(s[e])) ++e;
  if (e == s.size() && !final) return {Match::need, at};
  if (e == at) return {Match::fail, at};
  return {Match::ok, e};
}

}  // namespace

bool starts_in_reasoning(std::string_view prompt, const tmpl::ThinkingFormat& think) {
  const std::string_view open = trim(think.open), close = trim(think.close);
  if (close.empty()) return false;
  const std::string_view tail = trim(prompt);
  if (!open.empty()) return tail.ends_with(open);
  return think.prompt_opens && !tail.ends_with(close);
}

ChatOutputParser::ChatOutputParser(const ToolFormat* tools, nlohmann::json tool_defs, tmpl::ThinkingFormat think,
                                   bool in_reasoning)
    : tools_(tools && tools->supported ? tools : nullptr),
      tool_defs_(std::move(tool_defs)),
      think_(std::move(think)),
      state_(in_reasoning && !trim(think_.close).empty() ? State::reasoning : State::content) {}

void ChatOutputParser::emit_content(OutputDelta& out, std::string_view s) {
  if (!content_started_) {  // the text between reasoning (or the prompt) and the content
    s = s.substr(skip_space(s, 0));
    if (s.empty()) return;
    content_started_ = true;
  }
  out.content += s;
  content_ += s;
}

void ChatOutputParser::emit_reasoning(OutputDelta& out, std::string_view s) {
  if (reasoning_.empty()) s = s.substr(skip_space(s, 0));
  out.reasoning += s;
  reasoning_ += s;
}

OutputDelta ChatOutputParser::feed(std::string_view text) {
  buf_ += text;
  OutputDelta out;
  while (step(out, false)) {
  }
  return out;
}

OutputDelta ChatOutputParser::finish() {
  OutputDelta out;
  while (step(out, true)) {
  }
  // Whatever could not be parsed is the model's text, not lost.
  if (!buf_.empty()) {
    if (state_ == State::reasoning) emit_reasoning(out, buf_);
    else emit_content(out, buf_);
    buf_.clear();
  }
  return out;
}

bool ChatOutputParser::step(OutputDelta& out, bool final) {
  switch (state_) {
    case State::reasoning: return step_reasoning(out, final);
    case State::content: return step_content(out, final);
    case State::calls: return step_calls(out, final);
    case State::tail:
      emit_content(out, buf_);
      buf_.clear();
      return false;
  }
  return false;
}

bool ChatOutputParser::step_reasoning(OutputDelta& out, bool final) {
  const std::string_view close = trim(think_.close);
  const size_t at = buf_.find(close);
  if (at == std::string::npos) {
    const size_t hold = final ? 0 : partial_suffix(buf_, close);
    std::string_view settled = std::string_view(buf_).substr(0, buf_.size() - hold);
    // Trailing whitespace may belong to the close marker's own spacing: hold it too.
    if (!final) settled = settled.substr(0, settled.find_last_not_of(" \n\t\r") + 1);
    emit_reasoning(out, settled);
    buf_.erase(0, settled.size());
    return false;
  }
  std::string_view r = std::string_view(buf_).substr(0, at);
  r = r.substr(0, r.find_last_not_of(" \n\t\r") + 1);
  emit_reasoning(out, r);
  buf_.erase(0, at + close.size());
  state_ = State::content;
  return true;
}

bool ChatOutputParser::step_content(OutputDelta& out, bool final) {
  // A reasoning block opened at the start of the reply.
  const std::string_view open = trim(think_.open);
  if (!content_started_ && !open.empty() && !trim(think_.close).empty()) {
    const std::string_view rest = std::string_view(buf_).substr(skip_space(buf_, 0));
    if (rest.starts_with(open)) {
      buf_.erase(0, buf_.size() - rest.size() + open.size());
      state_ = State::reasoning;
      return true;
    }
    if (!final && open.starts_with(rest)) return false;
  }
  if (!tools_) {
    emit_content(out, buf_);
    buf_.clear();
    return false;
  }
  std::string_view trigger = trim(tools_->block_open);
  if (trigger.empty()) trigger = trim(tools_->call_open);
  if (trigger.empty()) {
    // Calls without any marker (a bare JSON object) are calls only at the start of the reply.
    if (content_started_ || calls_.size()) {
      emit_content(out, buf_);
      buf_.clear();
      return false;
    }
    const size_t at = skip_space(buf_, 0);
    if (at == buf_.size() && !final) return false;
    if (at < buf_.size() && buf_[at] == '{') {
      state_ = State::calls;
      return true;
    }
    state_ = State::tail;
    return true;
  }
  const size_t at = buf_.find(trigger);
  if (at == std::string::npos) {
    const size_t hold = final ? 0 : partial_suffix(buf_, trigger);
    emit_content(out, std::string_view(buf_).substr(0, buf_.size() - hold));
    buf_.erase(0, buf_.size() - hold);
    return false;
  }
  emit_content(out, std::string_view(buf_).substr(0, at));
  buf_.erase(0, at);
  state_ = State::calls;
  return true;
}

std::string ChatOutputParser::param_value(const std::string& fn, const std::string& key, std::string_view text) const {
  text = trim(text);
  if (tool_defs_.is_array()) {
    for (const auto& t : tool_defs_) {
      const auto* f = t.contains("function") ? &t["function"] : nullptr;
      if (!f || !f->is_object() || f->value("name", "") != fn) continue;
      const auto p = f->value("parameters", nlohmann::json::object());
      if (p.is_object() && p.contains("properties") && p["properties"].contains(key) &&
          p["properties"][key].is_object() && p["properties"][key].value("type", nlohmann::json()) == "string")
        return json_text(nlohmann::json(std::string(text)));
    }
  }
  const auto v = nlohmann::json::parse(text, nullptr, false);
  return v.is_discarded() ? json_text(nlohmann::json(std::string(text))) : json_text(v);
}

namespace {

/// The name_then_args / name_then_params text after the name: mid (with the call id inside).
Match mid_at(std::string_view s, size_t at, const ToolFormat& f, bool final) {
  if (!f.has_id) return match_seq(s, at, {f.mid}, final);
  auto m = match_seq(s, at, {f.id_before}, final);
  if (m.status != Match::ok) return m;
  const std::string_view after = trim(f.id_after);
  const size_t e = s.find(after, m.end);
  if (e == std::string_view::npos) return {final ? Match::fail : Match::need, at};
  return {Match::ok, e + after.size()};
}

/// The JSON object at `at` as the text of an arguments object (need/fail as json_object_at).
Match json_args_at(std::string_view s, size_t at, bool final, std::string& out) {
  Match j = json_object_at(s, at, final);
  if (j.status != Match::ok) return j;
  const size_t b = skip_space(s, at);
  const auto args = nlohmann::json::parse(s.substr(b, j.end - b), nullptr, false);
  if (!args.is_object()) return {Match::fail, at};
  out = json_text(args);
  return j;
}

}  // namespace

Match ChatOutputParser::parse_call(std::string_view s, size_t at, bool final, ParsedToolCall& call) const {
  const ToolFormat& f = *tools_;
  if (f.kind == ToolFormat::Kind::json_object) {
    Match j = json_object_at(s, at, final);
    if (j.status != Match::ok) return j;
    const size_t b = skip_space(s, at);
    const auto obj = nlohmann::json::parse(s.substr(b, j.end - b), nullptr, false);
    if (!obj.is_object() || !obj.contains(f.name_key) || !obj[f.name_key].is_string()) return {Match::fail, at};
    call.name = obj[f.name_key];
    nlohmann::json args = obj.value(f.args_key, nlohmann::json::object());
    if (args.is_string()) args = nlohmann::json::parse(args.get<std::string>(), nullptr, false);
    if (!args.is_object()) return {Match::fail, at};
    call.arguments = json_text(args);
    return j;
  }
  Match n = name_at(s, at, final);
  if (n.status != Match::ok) return n;
  call.name = std::string(s.substr(skip_space(s, at), n.end - skip_space(s, at)));
  Match md = mid_at(s, n.end, f, final);
  if (md.status != Match::ok) return md;
  if (f.kind == ToolFormat::Kind::name_then_args) return json_args_at(s, md.end, final, call.arguments);
  return parse_params(s, md.end, final, call);
}

Match ChatOutputParser::parse_params(std::string_view s, size_t at, bool final, ParsedToolCall& call) const {
  const ToolFormat& f = *tools_;
  const std::string_view pmid = trim(f.param_mid), pclose = trim(f.param_close);
  std::string args = "{";
  for (bool first = true;; first = false) {
    Match po = first ? match_seq(s, at, {f.param_open}, final) : match_seq(s, at, {f.param_sep, f.param_open}, final);
    if (po.status == Match::need) return po;
    if (po.status == Match::fail) break;
    const size_t k = pmid.empty() ? std::string_view::npos : s.find(pmid, po.end);
    if (k == std::string_view::npos) return {final ? Match::fail : Match::need, at};
    const size_t v = pclose.empty() ? std::string_view::npos : s.find(pclose, k + pmid.size());
    if (v == std::string_view::npos) return {final ? Match::fail : Match::need, at};
    const std::string key(trim(s.substr(po.end, k - po.end)));
    if (!first) args += ",";
    args += json_text(nlohmann::json(key)) + ":" + param_value(call.name, key, s.substr(k + pmid.size(), v - k - pmid.size()));
    at = v + pclose.size();
  }
  const auto parsed = nlohmann::json::parse(args + "}", nullptr, false);
  if (!parsed.is_object()) return {Match::fail, at};
  call.arguments = json_text(parsed);
  return {Match::ok, at};
}

bool ChatOutputParser::step_calls(OutputDelta& out, bool final) {
  const ToolFormat& f = *tools_;
  const std::string_view s = buf_;
  auto fail_to_content = [&] {  // not a call after all: the rest is the model's text
    state_ = State::tail;
    return true;
  };
  // The opening text: the block's (first call) or the separator's, then the call's.
  if (in_block_) {  // after a call: the block's close, else the separator and the next call
    Match close = match_seq(s, 0, {f.block_close}, final);
    if (close.status == Match::need) return false;
    if (close.status == Match::ok && close.end > 0) {
      buf_.erase(0, close.end);
      state_ = State::tail;
      return true;
    }
  }
  Match m = in_block_ ? match_seq(s, 0, {f.separator, f.call_open}, final) : match_seq(s, 0, {f.block_open, f.call_open}, final);
  if (m.status == Match::need) return false;
  if (m.status == Match::fail || (in_block_ && final && skip_space(s, m.end) == s.size())) return fail_to_content();
  ParsedToolCall call;
  const Match body = parse_call(s, m.end, final, call);
  if (body.status == Match::need) return false;
  if (body.status == Match::fail) return fail_to_content();
  const size_t at = body.end;
  Match c = match_seq(s, at, {f.call_close}, final);
  if (c.status == Match::need) return false;
  if (c.status == Match::fail && !final) return fail_to_content();
  call.id = new_call_id();
  out.calls.emplace_back(static_cast<int>(calls_.size()), call);
  calls_.push_back(std::move(call));
  buf_.erase(0, c.status == Match::ok ? c.end : at);
  in_block_ = true;
  if (!f.parallel) state_ = State::tail;
  return true;
}

}  // namespace fuselm::server
