#pragma once
// JSON from outside with a nesting limit. nlohmann parses any depth without recursion, but
// dump(), operator== and our own readers recurse: a document nested 100,000 deep (a few hundred
// KB of brackets) would overflow the stack. No real IR, safetensors header, shard index,
// config.json or tokenizer.json nests anywhere near kMaxJsonDepth.
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <utility>

namespace fuselm::base {

inline constexpr int kMaxJsonDepth = 256;

/// Thrown by parse_json_limited for a document nested deeper than its limit (the message says
/// how deep; callers prefix the file).
class JsonTooDeep : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
/// A parser callback (of nlohmann::json or nlohmann::ordered_json) that discards (and flags) any
/// array or object opened at depth >= max_depth, then defers to `inner`.
template <class Json>
typename Json::parser_callback_t depth_limit(int max_depth, bool& too_deep, const typename Json::parser_callback_t& inner) {
  return [max_depth, &too_deep, inner](int depth, typename Json::parse_event_t ev, Json& v) {
    if (too_deep) return false;
    if ((ev == Json::parse_event_t::object_start || ev == Json::parse_event_t::array_start) && depth >= max_depth) {
      too_deep = true;
      return false;
    }
    return inner ? inner(depth, ev, v) : true;
  };
}

template <class Json>
Json checked(Json j, bool too_deep, int max_depth) {
  if (too_deep) throw JsonTooDeep("JSON nested deeper than " + std::to_string(max_depth) + " levels");
  return j;
}
}  // namespace detail

/// Json::parse(input) (Json: nlohmann::json or nlohmann::ordered_json) that throws JsonTooDeep
/// when arrays or objects nest deeper than max_depth, before any deep value is built (deeper parts
/// are discarded while parsing). Other failures throw as parse does.
template <class Json, class Input>
Json parse_json_limited_as(Input&& input, int max_depth = kMaxJsonDepth) {
  bool too_deep = false;
  auto j = Json::parse(std::forward<Input>(input), detail::depth_limit<Json>(max_depth, too_deep, nullptr));
  return detail::checked(std::move(j), too_deep, max_depth);
}

/// parse_json_limited_as<nlohmann::json>; `inner` is another parser callback to run as well (may
/// be empty).
template <class Input>
nlohmann::json parse_json_limited(Input&& input, int max_depth = kMaxJsonDepth,
                                  const nlohmann::json::parser_callback_t& inner = nullptr) {
  bool too_deep = false;
  auto j = nlohmann::json::parse(std::forward<Input>(input), detail::depth_limit<nlohmann::json>(max_depth, too_deep, inner));
  return detail::checked(std::move(j), too_deep, max_depth);
}

/// The same for the bytes [begin, end).
template <class It>
nlohmann::json parse_json_limited(It begin, It end, int max_depth, const nlohmann::json::parser_callback_t& inner) {
  bool too_deep = false;
  auto j = nlohmann::json::parse(begin, end, detail::depth_limit<nlohmann::json>(max_depth, too_deep, inner));
  return detail::checked(std::move(j), too_deep, max_depth);
}

}  // namespace fuselm::base
