#include "grammar/schema_check.h"

#include <set>
#include <string>

#include "grammar/grammar.h"

namespace fuselm::grammar {
namespace {

using nlohmann::json;

// Keywords that never constrain an instance (JSON Schema 2020-12's meta-data and content
// vocabularies): accepted anywhere.
const std::set<std::string> kAnnotations = {
    "title",    "description", "examples",  "$comment",        "default",          "deprecated",
    "readOnly", "writeOnly",   "$schema",   "contentEncoding", "contentMediaType", "contentSchema"};
// Keywords xgrammar picks one of per schema object, ignoring the rest of the object.
const std::set<std::string> kDispatch = {"$ref", "const", "enum", "anyOf", "oneOf", "allOf"};
const std::set<std::string> kNumeric = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                        "multipleOf"};
const std::set<std::string> kString = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string> kArray = {"items",       "prefixItems", "minItems",    "maxItems",
                                      "uniqueItems", "contains",    "minContains", "maxContains",
                                      "unevaluatedItems"};
const std::set<std::string> kObject = {
    "properties",    "required",      "additionalProperties", "unevaluatedProperties",
    "minProperties", "maxProperties", "patternProperties",    "propertyNames",
    "dependentRequired", "dependentSchemas"};
// String formats xgrammar compiles to a regular expression (JSONFormatToRegexPattern); any other
// format would be ignored.
// The keywords from which xgrammar reads an object (else an array) schema when "type" is absent.
const std::set<std::string> kObjectMarkers = {"properties", "additionalProperties", "unevaluatedProperties"};
const std::set<std::string> kArrayMarkers = {"items", "prefixItems", "unevaluatedItems"};
const std::set<std::string> kFormats = {"email", "date",  "time",     "date-time", "duration",
                                        "ipv4",  "ipv6", "hostname", "uuid",      "uri"};
const std::set<std::string> kTypes = {"null", "boolean", "integer", "number", "string", "array", "object"};

std::string escape_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string child(const std::string& ptr, const std::string& key) { return ptr + "/" + escape_token(key); }

[[noreturn]] void refuse(const std::string& ptr, const std::string& keyword, const std::string& why) {
  throw UnsupportedSchemaError(keyword, child(ptr, keyword), why);
}

[[noreturn]] void malformed(const std::string& ptr, const std::string& keyword, const std::string& why) {
  throw GrammarError("invalid JSON Schema: '" + keyword + "' at '" + child(ptr, keyword) + "' " + why);
}

/// The JSON Schema types `v` is an instance of ("integer" values are also "number"s).
bool has_type(const json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "array") return v.is_array();
  if (type == "object") return v.is_object();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    if (v.is_number_integer()) return true;
    return v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()));
  }
  return false;
}

class Walker {
 public:
  Walker(const json& root, bool strict) : root_(root), strict_(strict) {}

  void walk(const json& s, const std::string& ptr) {
    if (s.is_boolean()) return;  // true: anything; false: xgrammar refuses as unsatisfiable
    if (!s.is_object()) throw GrammarError("invalid JSON Schema: the schema at '" + ptr + "' is not an object or boolean");
    std::string dispatch;
    for (const auto& [key, value] : s.items()) {
      if (kAnnotations.count(key)) continue;
      if (key == "$defs" || key == "definitions") {
        walk_map(s, ptr, key);
      } else if (key == "$id") {
        if (!ptr.empty()) refuse(ptr, key, "is supported only at the schema's root");
      } else if (kDispatch.count(key)) {
        if (!dispatch.empty()) refuse(ptr, key, "cannot be combined with '" + dispatch + "' in one schema object");
        dispatch = key;
      } else if (key != "type" && !kNumeric.count(key) && !kString.count(key) && !kArray.count(key) &&
                 !kObject.count(key)) {
        refuse(ptr, key, "is not a JSON Schema keyword that fuselm enforces");
      }
    }
    if (!dispatch.empty()) {
      check_dispatch(s, ptr, dispatch);
    } else {
      check_typed(s, ptr);
    }
  }

 private:
  const json& root_;
  bool strict_;

  void walk_map(const json& s, const std::string& ptr, const std::string& key) {
    const json& m = s.at(key);
    if (!m.is_object()) malformed(ptr, key, "must be an object");
    for (const auto& [name, sub] : m.items()) walk(sub, child(child(ptr, key), name));
  }

  void walk_list(const json& s, const std::string& ptr, const std::string& key) {
    const json& a = s.at(key);
    if (!a.is_array() || a.empty()) malformed(ptr, key, "must be a non-empty array");
    for (size_t i = 0; i < a.size(); ++i) walk(a[i], child(child(ptr, key), std::to_string(i)));
  }

  /// Keywords beside `dispatch` other than annotations and $defs are refused, except a `type`
  /// beside const/enum that every value already has (pydantic writes it; it then changes nothing).
  void check_dispatch(const json& s, const std::string& ptr, const std::string& dispatch) {
    for (const auto& [key, value] : s.items()) {
      if (key == dispatch || kAnnotations.count(key) || key == "$defs" || key == "definitions" || key == "$id") continue;
      if (key == "type" && (dispatch == "const" || dispatch == "enum") && type_covers(s, ptr, dispatch)) continue;
      refuse(ptr, key, "beside '" + dispatch + "' in one schema object is not enforced");
    }
    const json& v = s.at(dispatch);
    if (dispatch == "$ref") {
      check_ref(v, ptr);
    } else if (dispatch == "enum") {
      if (!v.is_array() || v.empty()) malformed(ptr, dispatch, "must be a non-empty array");
    } else if (dispatch == "anyOf") {
      walk_list(s, ptr, dispatch);
    } else if (dispatch == "oneOf") {
      // Alternatives that no value can match twice make oneOf the anyOf xgrammar enforces.
      if (!disjoint_by_type(v)) refuse(ptr, dispatch, "(exactly one alternative) is enforced only for alternatives of distinct types; use anyOf");
      walk_list(s, ptr, dispatch);
    } else if (dispatch == "allOf") {
      if (v.is_array() && v.size() > 1) refuse(ptr, dispatch, "of more than one schema is not enforced");
      walk_list(s, ptr, dispatch);
    }
  }

  /// Whether every alternative is an object with one "type" and no two share a type (integer and
  /// number overlap).
  static bool disjoint_by_type(const json& options) {
    if (!options.is_array() || options.empty()) return false;
    std::set<std::string> seen;
    for (const auto& o : options) {
      if (!o.is_object() || !o.contains("type") || !o.at("type").is_string()) return false;
      std::string t = o.at("type").get<std::string>();
      if (t == "integer") t = "number";
      if (!seen.insert(t).second) return false;
    }
    return true;
  }

  bool type_covers(const json& s, const std::string& ptr, const std::string& dispatch) {
    std::set<std::string> types = read_types(s, ptr);
    const json& v = s.at(dispatch);
    json values = dispatch == "const" ? json::array({v}) : v;
    if (!values.is_array()) return false;
    for (const auto& value : values) {
      bool ok = false;
      for (const auto& t : types) ok = ok || has_type(value, t);
      if (!ok) return false;
    }
    return true;
  }

  void check_ref(const json& v, const std::string& ptr) {
    if (!v.is_string()) malformed(ptr, "$ref", "must be a string");
    std::string uri = v.get<std::string>();
    if (uri == "#") return;
    if (uri.rfind("#/", 0) != 0) refuse(ptr, "$ref", "'" + uri + "' is not a local reference ('#' or '#/...')");
    try {
      (void)root_.at(json::json_pointer(uri.substr(1)));
    } catch (const std::exception&) {
      malformed(ptr, "$ref", "'" + uri + "' points to nothing in the schema");
    }
  }

  std::set<std::string> read_types(const json& s, const std::string& ptr) {
    std::set<std::string> types;
    if (!s.contains("type")) return types;
    const json& t = s.at("type");
    json list = t.is_array() ? t : json::array({t});
    if (list.empty()) malformed(ptr, "type", "must not be empty");
    for (const auto& e : list) {
      if (!e.is_string() || !kTypes.count(e.get<std::string>())) malformed(ptr, "type", "must name JSON types");
      types.insert(e.get<std::string>());
    }
    return types;
  }

  static bool has_any(const json& s, const std::set<std::string>& keys) {
    for (const auto& k : keys) {
      if (s.contains(k)) return true;
    }
    return false;
  }

  void check_typed(const json& s, const std::string& ptr) {
    std::set<std::string> types = read_types(s, ptr);
    // Without "type", xgrammar reads an object schema from object keywords, else an array schema
    // from array keywords, else any value, ignoring every other keyword.
    if (types.empty()) {
      if (has_any(s, kObjectMarkers)) types = {"object"};
      else if (has_any(s, kArrayMarkers)) types = {"array"};
      for (const auto& k : s.items()) {
        const std::string& key = k.key();
        if (types.empty() && (kNumeric.count(key) || kString.count(key) || kArray.count(key) || kObject.count(key)))
          refuse(ptr, key, "without a \"type\" (or properties, items) is not enforced");
      }
    }
    if (types.count("integer")) check_integer(s, ptr);
    if (types.count("number") && s.contains("multipleOf"))
      refuse(ptr, "multipleOf", "on numbers is not enforced (only on integers)");
    if (types.count("string")) check_string(s, ptr);
    if (types.count("array")) check_array(s, ptr);
    if (types.count("object")) check_object(s, ptr);
  }

  void check_integer(const json& s, const std::string& ptr) {
    if (!s.contains("multipleOf")) return;
    const json& m = s.at("multipleOf");
    if (!m.is_number() || m.get<double>() <= 0) malformed(ptr, "multipleOf", "must be a number above 0");
    double d = m.get<double>();
    if (d != static_cast<double>(static_cast<int64_t>(d)) || d > 1024)
      refuse(ptr, "multipleOf", "on integers is enforced only for whole numbers up to 1024");
    for (const char* bound : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (s.contains(bound)) refuse(ptr, "multipleOf", std::string("together with '") + bound + "' is not enforced");
    }
  }

  void check_string(const json& s, const std::string& ptr) {
    bool lengths = s.contains("minLength") || s.contains("maxLength");
    const char* length_kw = s.contains("minLength") ? "minLength" : "maxLength";
    if (s.contains("format")) {
      const json& f = s.at("format");
      if (!f.is_string()) malformed(ptr, "format", "must be a string");
      if (!kFormats.count(f.get<std::string>()))
        refuse(ptr, "format", "'" + f.get<std::string>() + "' is not enforced");
      if (s.contains("pattern")) refuse(ptr, "pattern", "together with 'format' is not enforced");
      if (lengths) refuse(ptr, length_kw, "together with 'format' is not enforced");
    }
    if (s.contains("pattern")) {
      if (!s.at("pattern").is_string()) malformed(ptr, "pattern", "must be a string");
      if (lengths) refuse(ptr, length_kw, "together with 'pattern' is not enforced");
    }
  }

  void check_array(const json& s, const std::string& ptr) {
    for (const char* k : {"contains", "minContains", "maxContains"}) {
      if (s.contains(k)) refuse(ptr, k, "is not enforced");
    }
    if (s.contains("uniqueItems") && s.at("uniqueItems") != json(false))
      refuse(ptr, "uniqueItems", "is not enforced");
    if (s.contains("items")) walk(s.at("items"), child(ptr, "items"));
    if (s.contains("prefixItems")) walk_list(s, ptr, "prefixItems");
    // Beside "items" unevaluatedItems constrains nothing (items covers every further item).
    if (s.contains("unevaluatedItems") && !s.contains("items"))
      walk(s.at("unevaluatedItems"), child(ptr, "unevaluatedItems"));
  }

  void check_object(const json& s, const std::string& ptr) {
    for (const char* k : {"patternProperties", "propertyNames", "dependentRequired", "dependentSchemas"}) {
      if (s.contains(k)) refuse(ptr, k, "is not enforced");
    }
    // normalize_schema() renamed unevaluatedProperties to additionalProperties wherever they mean
    // the same (no in-place applicator beside them); one left is not enforced.
    if (s.contains("unevaluatedProperties")) refuse(ptr, "unevaluatedProperties", "is not enforced here");
    const bool named = s.contains("properties") && s.at("properties").is_object() && !s.at("properties").empty();
    if (s.contains("properties")) check_properties(s, ptr);
    if (s.contains("required")) check_required(s, ptr);
    if (s.contains("additionalProperties")) {
      // A further key may be written with escapes ("\u0066oo"), which xgrammar does not decode: it
      // could stand for a declared property with a value the declared schema refuses.
      if (named && s.at("additionalProperties") != json(false))
        refuse(ptr, "additionalProperties", "other than false beside 'properties' is not enforced");
      walk(s.at("additionalProperties"), child(ptr, "additionalProperties"));
    } else if (named && !strict_) {
      refuse(ptr, "properties", "of an open object is not enforced");  // normalize_schema closes them
    }
  }

  void check_properties(const json& s, const std::string& ptr) {
    for (const auto& [name, sub] : s.at("properties").items()) {
      // xgrammar writes a key as its bytes between quotes: one that JSON must escape is not matched.
      for (unsigned char c : name) {
        if (c == '"' || c == '\\' || c < 0x20)
          refuse(ptr, "properties", "a property name with a quote, backslash or control character is not enforced");
      }
    }
    walk_map(s, ptr, "properties");
  }

  void check_required(const json& s, const std::string& ptr) {
    const json& r = s.at("required");
    if (!r.is_array()) malformed(ptr, "required", "must be an array of strings");
    for (const auto& name : r) {
      if (!name.is_string()) malformed(ptr, "required", "must be an array of strings");
      if (!s.contains("properties") || !s.at("properties").contains(name.get<std::string>()))
        refuse(ptr, "required", "names '" + name.get<std::string>() + "', which 'properties' does not define");
    }
  }
};

}  // namespace

void check_schema(const nlohmann::json& schema, bool strict) {
  Walker w(schema, strict);
  w.walk(schema, "");
}

namespace {

const std::set<std::string> kSchemaMaps = {"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"};
const std::set<std::string> kSchemaLists = {"prefixItems", "anyOf", "allOf", "oneOf"};
const std::set<std::string> kSchemaValues = {"items", "additionalProperties", "unevaluatedItems", "contains",
                                             "propertyNames", "not", "if", "then", "else", "contentSchema"};

bool has_dispatch(const nlohmann::ordered_json& s) {
  for (const auto& k : kDispatch)
    if (s.contains(k)) return true;
  return false;
}

/// A schema with type-specific keywords but no "type" (nor anything xgrammar reads a type from)
/// asserts them only on values of their type and lets every other value through; xgrammar would
/// drop them. Rewritten as that: anyOf one branch per type with its keywords, and the other types.
void split_by_type(nlohmann::ordered_json& s) {
  using oj = nlohmann::ordered_json;
  if (s.contains("type") || has_dispatch(s)) return;
  for (const auto* markers : {&kObjectMarkers, &kArrayMarkers})
    for (const auto& k : *markers)
      if (s.contains(k)) return;
  const std::pair<const char*, const std::set<std::string>*> groups[] = {
      {"number", &kNumeric}, {"string", &kString}, {"array", &kArray}, {"object", &kObject}};
  oj branches = oj::array(), rest = oj::array({"null", "boolean"}), out = oj::object();
  for (const auto& [type, keys] : groups) {
    oj branch = {{"type", type}};
    for (const auto& [k, v] : s.items())
      if (keys->count(k)) branch[k] = v;
    if (branch.size() > 1) branches.push_back(std::move(branch));
    else rest.push_back(type);
  }
  if (branches.empty()) return;
  for (const auto& [k, v] : s.items()) {
    bool typed = false;
    for (const auto& [type, keys] : groups) typed = typed || keys->count(k) > 0;
    if (!typed) out[k] = v;  // annotations, $defs, and what check_schema then refuses
  }
  branches.push_back({{"type", rest}});
  out["anyOf"] = std::move(branches);
  s = std::move(out);
}

}  // namespace

void normalize_schema(nlohmann::ordered_json& s) {
  if (!s.is_object()) return;
  split_by_type(s);
  if (!has_dispatch(s)) {
    if (s.contains("unevaluatedProperties")) {
      if (!s.contains("additionalProperties")) s["additionalProperties"] = s["unevaluatedProperties"];
      s.erase("unevaluatedProperties");
    }
    const auto props = s.find("properties");
    if (props != s.end() && props->is_object() && !props->empty() && !s.contains("additionalProperties"))
      s["additionalProperties"] = false;
  }
  for (auto& [key, v] : s.items()) {
    if (kSchemaMaps.count(key) && v.is_object()) {
      for (auto& [name, sub] : v.items()) normalize_schema(sub);
    } else if (kSchemaLists.count(key) && v.is_array()) {
      for (auto& sub : v) normalize_schema(sub);
    } else if (kSchemaValues.count(key)) {
      normalize_schema(v);
    }
  }
}

}  // namespace fuselm::grammar
