#pragma once
// The values a template computes with, modelled on the Python objects jinja2 sees: None, bool,
// int, float, str (UTF-8, indexed by code point), list/tuple, dict (insertion ordered, string
// keys), callables (macros, globals, bound methods) and jinja2's default Undefined.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fuselm::tmpl {

struct Value;
class Context;

/// Positional and keyword arguments of a call, filter or test (after the operand).
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

/// A callable: macro, global function, bound method or loop.cycle.
struct Function {
  std::string name;
  std::string type_name = "function";  // for error messages: 'jinja2.runtime.Macro object', ...
  std::function<Value(Context&, Args&)> call;
};

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

struct Dict;
using List = std::vector<Value>;

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  bool tuple = false;     // List: a Python tuple (prints with parentheses)
  bool unsafe = false;    // Undefined: SecurityError rather than UndefinedError when used
  bool markup = false;    // String: markupsafe.Markup (from |safe, |escape): `+` escapes the other side
  int64_t i = 0;
  double f = 0;
  std::string s;          // String: the text; Undefined: the error message it raises when used
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> fn;

  static Value undefined(std::string message, bool unsafe = false);
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value markup_string(std::string v);
  static Value make_list(List items = {}, bool tuple = false);
  static Value make_dict();
  static Value function(std::string name, std::function<Value(Context&, Args&)> call,
                        std::string type_name = "function");

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  double as_double() const { return kind == Kind::Float ? f : static_cast<double>(kind == Kind::Bool ? b : i); }
};

/// A Python dict with string keys, in insertion order. `namespace_` marks jinja2's namespace(),
/// the one object `set ns.attr = ...` may change; `loop` marks a loop object.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool namespace_ = false;
  bool loop = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

/// markupsafe.escape of a str: & < > " ' as HTML entities.
std::string html_escape(const std::string& s);
/// A String result that keeps `like`'s Markup-ness (Markup methods return Markup).
Value same_kind(const Value& like, std::string s);

/// Raises the Undefined's error (jinja2's UndefinedError or the sandbox's SecurityError).
[[noreturn]] void fail_undefined(const Value& v);

/// Python truthiness (Undefined is false).
bool truthy(const Value& v);
/// Python str(v) as jinja2 prints it: Undefined -> "", None -> "None", True -> "True", floats as
/// repr, containers as repr.
std::string to_str(const Value& v);
/// Python repr(v).
std::string repr(const Value& v);
/// Python repr of a float ("1.0", "1e+20", "1.5e-07").
std::string float_repr(double d);
/// Python ==.
bool equals(const Value& a, const Value& b);
/// Python <, with Python's TypeError for unorderable operands (message names both types).
bool less(const Value& a, const Value& b);
/// jinja2's object_type_repr: "dict object", "list object", "None", ...
std::string object_type_repr(const Value& v);
/// The Python type name: "dict", "list", "str", "int", "NoneType", ...
std::string type_name(const Value& v);
/// Python len(); Undefined has length 0; throws for values without a length.
int64_t length(const Value& v);
/// The items iterating `v` yields: list items, dict keys, the characters of a string; Undefined
/// yields nothing; others raise "'int' object is not iterable".
List iterate(const Value& v);

}  // namespace fuselm::tmpl
