#pragma once
// Small scanners over text that holds JSON amid other text (a model's tool calls, template renders).
#include <string>
#include <string_view>

namespace fuselm::tmpl {

/// The end (one past) of the JSON object or array that starts at s[at] ('{' or '['), matching
/// brackets outside strings; npos when s ends before it closes or s[at] opens neither. Only the
/// brackets are checked: the caller parses the span.
size_t json_value_end(std::string_view s, size_t at);

/// s without leading and trailing ASCII whitespace.
std::string_view trim(std::string_view s);

}  // namespace fuselm::tmpl
