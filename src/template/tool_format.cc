#include "template/tool_format.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "template/json_scan.h"

namespace fuselm::tmpl {
namespace {

using nlohmann::ordered_json;

// Probe names and values: distinctive strings no template writes by itself. The plain-text
// assistant content starts with '@' so that it shares no first character with a call's text.
constexpr const char* kContent = "@@zqxtext";
constexpr const char* kReasoning = "zqxthink";

ordered_json probe_tools() {
  return ordered_json::parse(R"([
    {"type": "function", "function": {"name": "zqxfa", "description": "zqxdesc",
      "parameters": {"type": "object", "properties": {"zqxka": {"type": "string"}}, "required": ["zqxka"]}}},
    {"type": "function", "function": {"name": "zqxfb", "description": "zqxdesc",
      "parameters": {"type": "object", "properties": {"zqxkb": {"type": "string"}, "zqxkc": {"type": "string"}}}}}])");
}

// Call ids of 9 alphanumerics (some templates refuse any other length).
ordered_json probe_call(int which) {
  if (which == 0)
    return {{"id", "zqxid0001"}, {"type", "function"}, {"function", {{"name", "zqxfa"}, {"arguments", {{"zqxka", "zqxva"}}}}}};
  return {{"id", "zqxid0002"},
          {"type", "function"},
          {"function", {{"name", "zqxfb"}, {"arguments", {{"zqxkb", "zqxvb"}, {"zqxkc", "zqxvc"}}}}}};
}

ordered_json user_turn() { return {{"role", "user"}, {"content", "zqxuser"}}; }

std::optional<std::string> try_render(const ProbeRenderer& render, const ordered_json& messages, bool tools, bool gen) {
  ordered_json vars = {{"messages", messages}, {"add_generation_prompt", gen}};
  if (tools) vars["tools"] = probe_tools();
  try {
    return render(vars);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

size_t common_prefix(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

size_t common_suffix(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[a.size() - 1 - n] == b[b.size() - 1 - n]) ++n;
  return n;
}

/// A common prefix that ends inside a marker both renders open alike ("<" of "<think>" and of
/// "<tool_call>") is moved back to the marker's start: unless the other render continues with the
/// probe text, the bracket characters that open markup are given back.
size_t unsplit_marker(std::string_view text, size_t p, std::string_view other, std::string_view probe = kContent) {
  if (other.substr(p).starts_with(probe)) return p;
  while (p > 0 && std::string_view("<[{|").find(text[p - 1]) != std::string_view::npos) --p;
  return p;
}

/// The assistant's part of `turn`: without the prefix and suffix it shares with `plain` (the same
/// conversation whose assistant turn is kContent).
std::string assistant_part(const std::string& turn, const std::string& plain) {
  const size_t p = unsplit_marker(turn, common_prefix(turn, plain), plain);
  const size_t s = std::min(common_suffix(turn, plain), turn.size() - p);
  return turn.substr(p, turn.size() - p - s);
}

/// A span [begin, end) of the assistant part.
struct Span {
  size_t begin = 0, end = 0;
};

/// Where call `which` sits in `part`: the JSON object holding its name and arguments.
std::optional<Span> find_json_call(const std::string& part, const ordered_json& call, ToolFormat& f, bool learn) {
  const auto& fn = call["function"];
  for (size_t at = part.find('{'); at != std::string::npos; at = part.find('{', at + 1)) {
    const size_t end = json_value_end(part, at);
    if (end == std::string::npos) continue;
    const auto obj = ordered_json::parse(part.substr(at, end - at), nullptr, false);
    if (!obj.is_object()) continue;
    std::string name_key, args_key;
    bool as_string = false;
    for (const auto& [k, v] : obj.items()) {
      if (v == fn["name"]) name_key = k;
      if (v == fn["arguments"]) args_key = k;
      if (v.is_string() && ordered_json::parse(v.get<std::string>(), nullptr, false) == fn["arguments"])
        args_key = k, as_string = true;
    }
    if (name_key.empty() || args_key.empty()) continue;
    if (learn) f.name_key = name_key, f.args_key = args_key, f.args_as_string = as_string;
    else if (f.name_key != name_key || f.args_key != args_key) return std::nullopt;
    return Span{at, end};
  }
  return std::nullopt;
}

/// The JSON object of `args` at or after `from` in `part`.
std::optional<Span> find_args_object(const std::string& part, size_t from, const ordered_json& args) {
  for (size_t at = part.find('{', from); at != std::string::npos; at = part.find('{', at + 1)) {
    const size_t end = json_value_end(part, at);
    if (end != std::string::npos && ordered_json::parse(part.substr(at, end - at), nullptr, false) == args)
      return Span{at, end};
  }
  return std::nullopt;
}

/// The text between a name and its arguments, split around the call id when it is written there.
bool learn_mid(ToolFormat& f, const std::string& mid, const std::string& id, bool learn) {
  if (!learn) {
    if (!f.has_id) return mid == f.mid;
    return mid == f.id_before + id + f.id_after;
  }
  f.mid = mid;
  if (const size_t at = mid.find(id); at != std::string::npos) {
    f.has_id = true;
    f.id_before = mid.substr(0, at);
    f.id_after = mid.substr(at + id.size());
  }
  return true;
}

/// name_then_params: the arguments of a call as open KEY mid VALUE close; learns the pieces from
/// a call with two arguments and checks a call with one. Returns the end of the last value.
std::optional<size_t> find_params(const std::string& part, size_t name_end, const ordered_json& args, ToolFormat& f,
                                  bool learn) {
  std::vector<Span> keys, values;
  size_t at = name_end;
  for (const auto& [k, v] : args.items()) {
    const size_t kp = part.find(k, at);
    if (kp == std::string::npos) return std::nullopt;
    const size_t vp = part.find(v.get<std::string>(), kp + k.size());
    if (vp == std::string::npos) return std::nullopt;
    keys.push_back({kp, kp + k.size()});
    values.push_back({vp, vp + v.get<std::string>().size()});
    at = values.back().end;
  }
  if (keys.empty()) return std::nullopt;
  const std::string lead = part.substr(name_end, keys[0].begin - name_end);
  const std::string pmid = part.substr(keys[0].end, values[0].begin - keys[0].end);
  if (learn) {
    if (keys.size() < 2) return std::nullopt;
    const std::string between = part.substr(values[0].end, keys[1].begin - values[0].end);
    const size_t open_len = common_suffix(lead, between);
    f.param_open = between.substr(between.size() - open_len);
    f.mid = lead.substr(0, lead.size() - open_len);
    f.param_mid = pmid;
    f.param_close = between.substr(0, between.size() - open_len);  // refined by the text after the last value
  } else if (pmid != f.param_mid || lead != f.mid + f.param_open) {
    return std::nullopt;
  }
  return values.back().end;
}

/// Locates call `which` in `part` from `from` for a name kind; learns the mid pieces when `learn`.
std::optional<Span> find_named_call(const std::string& part, size_t from, const ordered_json& call, ToolFormat& f,
                                    bool learn) {
  const auto& fn = call["function"];
  const std::string name = fn["name"];
  const size_t n = part.find(name, from);
  if (n == std::string::npos) return std::nullopt;
  const size_t name_end = n + name.size();
  if (learn || f.kind == ToolFormat::Kind::name_then_args) {
    if (auto a = find_args_object(part, name_end, fn["arguments"])) {
      if (learn) f.kind = ToolFormat::Kind::name_then_args;
      if (!learn_mid(f, part.substr(name_end, a->begin - name_end), call["id"], learn)) return std::nullopt;
      return Span{n, a->end};
    }
    if (!learn) return std::nullopt;
  }
  f.kind = ToolFormat::Kind::name_then_params;
  auto end = find_params(part, name_end, fn["arguments"], f, learn);
  if (!end) return std::nullopt;
  return Span{n, *end};
}

/// The calls of the two-call part (call 1 first, learning the structure from it for params).
std::optional<std::pair<Span, Span>> locate_pair(const std::string& part, ToolFormat& f) {
  if (f.kind == ToolFormat::Kind::json_object) {
    auto a = find_json_call(part, probe_call(0), f, false);
    if (!a) return std::nullopt;
    auto b = find_json_call(part.substr(a->end), probe_call(1), f, false);
    if (!b) return std::nullopt;
    return std::pair{*a, Span{b->begin + a->end, b->end + a->end}};
  }
  // name_then_params learns its pieces from the second call (two arguments), then checks the first.
  const bool params = f.kind == ToolFormat::Kind::name_then_params;
  auto b = find_named_call(part, 0, probe_call(1), f, params);
  if (!b) return std::nullopt;
  auto a = find_named_call(part, 0, probe_call(0), f, false);
  if (!a || a->end > b->begin) return std::nullopt;
  return std::pair{*a, *b};
}

/// Splits the text around the calls: `before` (ahead of the first call), `between` (between two
/// calls) and `after` (behind the last), into block/call open and close and the separator.
void split_markers(ToolFormat& f, const std::string& before, const std::string& between, const std::string& after) {
  const size_t open = common_suffix(before, between);
  f.call_open = between.substr(between.size() - open);
  const size_t close = std::min(common_prefix(between, after), between.size() - open);
  f.call_close = between.substr(0, close);
  f.separator = between.substr(close, between.size() - open - close);
  f.block_open = before.substr(0, before.size() - open);
  f.block_close = after.substr(close);
}

ToolFormat unsupported(std::string why) {
  ToolFormat f;
  f.why = std::move(why);
  return f;
}

/// The single-call form, learned from the one-call part only (templates that refuse two calls).
ToolFormat single_call(ToolFormat f, const std::string& part, Span call) {
  f.parallel = false;
  f.block_open.clear();
  f.call_open = part.substr(0, call.begin);
  f.call_close = part.substr(call.end);
  if (f.kind == ToolFormat::Kind::name_then_params) return unsupported("a template that takes one call with one argument");
  return f;
}

}  // namespace

ToolFormat discover_tool_format(const ProbeRenderer& render) {
  const ordered_json u = user_turn();
  const auto plain_gen = try_render(render, ordered_json::array({u}), false, true);
  const auto tools_gen = try_render(render, ordered_json::array({u}), true, true);
  if (!tools_gen) return unsupported("the template fails when given tools");
  if (plain_gen && *plain_gen == *tools_gen) return unsupported("the template does not render tools");
  auto assistant = [&](const ordered_json& calls) {
    ordered_json a = {{"role", "assistant"}, {"content", calls.empty() ? kContent : ""}};
    if (!calls.empty()) a["tool_calls"] = calls;
    return try_render(render, ordered_json::array({u, a}), true, false);
  };
  const auto plain = assistant(ordered_json::array());
  const auto one = assistant(ordered_json::array({probe_call(0)}));
  if (!plain || !one) return unsupported("the template fails on an assistant turn with a tool call");
  const std::string part1 = assistant_part(*one, *plain);
  ToolFormat f;
  f.supported = true;
  std::optional<Span> c1 = find_json_call(part1, probe_call(0), f, true);
  if (!c1) {
    // The name kinds learn their parameter pieces from the two-call render's second call.
    ToolFormat probe = f;
    c1 = find_named_call(part1, 0, probe_call(0), probe, true);
    if (!c1 && probe.kind != ToolFormat::Kind::name_then_params)
      return unsupported("the template does not render an assistant turn's tool calls (name and arguments)");
    f = probe;
    if (!c1) f.kind = ToolFormat::Kind::name_then_params;
  }
  const auto two = assistant(ordered_json::array({probe_call(0), probe_call(1)}));
  if (!two) {
    if (!c1) return unsupported("the template's call format could not be found");
    return single_call(f, part1, *c1);
  }
  const std::string part2 = assistant_part(*two, *plain);
  const auto pair = locate_pair(part2, f);
  if (!pair && c1 && part2.find(probe_call(1)["function"]["name"].get<std::string>()) == std::string::npos)
    return single_call(f, part1, *c1);  // the template writes the first call only
  if (!pair) return unsupported("the template's two-call rendering does not repeat its one-call rendering");
  const auto [a, b] = *pair;
  std::string after = part2.substr(b.end);
  if (f.kind == ToolFormat::Kind::name_then_params) {
    // The argument close text is the common prefix of the text after each call's last value.
    const std::string learned = f.param_close;  // close + separator, from between the two values
    f.param_close = learned.substr(0, common_prefix(learned, after));
    f.param_sep = learned.substr(f.param_close.size());
    after = after.substr(f.param_close.size());
  }
  const size_t a_end = a.end + (f.kind == ToolFormat::Kind::name_then_params ? f.param_close.size() : 0);
  const std::string between = part2.substr(a_end, b.begin - a_end);
  split_markers(f, part2.substr(0, a.begin), between, after);
  return f;
}

ThinkingFormat discover_thinking_format(const ProbeRenderer& render) {
  ThinkingFormat t;
  const ordered_json u = user_turn();
  const auto gen = try_render(render, ordered_json::array({u}), false, true);
  const auto plain = try_render(render, ordered_json::array({u, {{"role", "assistant"}, {"content", kContent}}}), false, false);
  if (!gen || !plain) return t;
  for (const char* key : {"reasoning_content", "thinking"}) {
    ordered_json a = {{"role", "assistant"}, {"content", kContent}, {key, kReasoning}};
    const auto with = try_render(render, ordered_json::array({u, a}), false, false);
    if (!with || *with == *plain) continue;
    const size_t r = with->find(kReasoning), c = with->find(kContent);
    if (r == std::string::npos || c == std::string::npos || c < r) continue;
    const size_t start = std::min(unsplit_marker(*with, common_prefix(*with, *gen), *gen, "\x01"), r);
    t.open = with->substr(start, r - start);
    t.close = with->substr(r + std::string(kReasoning).size(), c - r - std::string(kReasoning).size());
    t.prompt_opens = trim(t.open).empty();
    t.message_key = key;
    return t;
  }
  return t;
}

std::string describe(const ToolFormat& f) {
  if (!f.supported) return "unsupported: " + f.why;
  auto q = [](const std::string& s) { return ordered_json(s).dump(); };
  std::string kind = f.kind == ToolFormat::Kind::json_object     ? "json_object"
                     : f.kind == ToolFormat::Kind::name_then_args ? "name_then_args"
                                                                  : "name_then_params";
  std::string s = kind + " block=" + q(f.block_open) + "|" + q(f.block_close) + " call=" + q(f.call_open) + "|" +
                  q(f.call_close) + " sep=" + q(f.separator);
  if (f.kind == ToolFormat::Kind::json_object) s += " keys=" + f.name_key + "," + f.args_key + (f.args_as_string ? "(string)" : "");
  else s += " mid=" + (f.has_id ? q(f.id_before) + "+ID+" + q(f.id_after) : q(f.mid));
  if (f.kind == ToolFormat::Kind::name_then_params)
    s += " param=" + q(f.param_open) + "K" + q(f.param_mid) + "V" + q(f.param_close) + " psep=" + q(f.param_sep);
  if (!f.parallel) s += " single";
  return s;
}

}  // namespace fuselm::tmpl
