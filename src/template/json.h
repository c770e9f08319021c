#pragma once
// JSON in and out of template values: nlohmann -> Value (object key order kept when the input
// keeps it), and Python's json.dumps as transformers' tojson filter calls it.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "template/value.h"

namespace fuselm::tmpl {

Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

struct DumpOptions {
  bool ensure_ascii = false;           // transformers' default (jinja2's own tojson differs)
  std::optional<std::string> indent;   // nullopt: one line
  std::string item_sep = ", ";         // Python: ", " without indent, "," with it
  std::string key_sep = ": ";
  bool sort_keys = false;
};

/// Python's json.dumps(v, ...); throws TemplateError("Object of type X is not JSON serializable").
std::string dumps(const Value& v, const DumpOptions& opt);

}  // namespace fuselm::tmpl
