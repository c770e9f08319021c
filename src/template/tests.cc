// jinja2's built-in tests (jinja2/tests.py, 3.1): `x is name(args)`.
#include <cmath>
#include <map>

#include "template/builtins.h"
#include "template/chat_template.h"
#include "template/evaluator.h"
#include "template/pystr.h"

namespace fuselm::tmpl {
namespace {

const Value& need(const Args& a, const char* name) {
  const Value* v = arg(a, 0, name);
  if (!v) throw TemplateError(std::string("test needs an argument '") + name + "'");
  return *v;
}

int64_t mod(const Value& v, int64_t m) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.kind == Kind::Int || v.kind == Kind::Bool) {
    int64_t x = v.kind == Kind::Bool ? v.b : v.i, r = x % m;
    return r < 0 ? r + (m < 0 ? -m : m) : r;
  }
  if (v.kind == Kind::Float) return std::fmod(v.f, static_cast<double>(m)) == 0 ? 0 : 1;
  throw TemplateError("unsupported operand type(s) for %: '" + type_name(v) + "' and 'int'");
}

bool t_odd(Context&, const Value& v, Args&) { return mod(v, 2) == 1; }
bool t_even(Context&, const Value& v, Args&) { return mod(v, 2) == 0; }
bool t_divisibleby(Context&, const Value& v, Args& a) {
  const Value& n = need(a, "num");
  if (n.kind != Kind::Int || n.i == 0) throw TemplateError("divisibleby needs a non-zero integer");
  return mod(v, n.i) == 0;
}
bool t_defined(Context&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Context&, const Value& v, Args&) { return v.is_undefined(); }
bool t_none(Context&, const Value& v, Args&) { return v.is_none(); }
bool t_boolean(Context&, const Value& v, Args&) { return v.kind == Kind::Bool; }
bool t_false(Context&, const Value& v, Args&) { return v.kind == Kind::Bool && !v.b; }
bool t_true(Context&, const Value& v, Args&) { return v.kind == Kind::Bool && v.b; }
bool t_integer(Context&, const Value& v, Args&) { return v.kind == Kind::Int; }
bool t_float(Context&, const Value& v, Args&) { return v.kind == Kind::Float; }
bool t_number(Context&, const Value& v, Args&) { return v.is_number(); }
bool t_string(Context&, const Value& v, Args&) { return v.is_string(); }
bool t_mapping(Context&, const Value& v, Args&) { return v.is_dict() && !v.dict->namespace_ && !v.dict->loop; }
bool t_iterable(Context&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.dict->namespace_);
}
bool t_sequence(Context&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.dict->namespace_ && !v.dict->loop);
}
bool t_callable(Context&, const Value& v, Args&) { return v.kind == Kind::Function || v.is_undefined(); }
bool t_lower(Context&, const Value& v, Args&) { return pystr::is_lower(to_str(v)); }
bool t_upper(Context&, const Value& v, Args&) { return pystr::is_upper(to_str(v)); }
bool t_escaped(Context&, const Value&, Args&) { return false; }
bool t_filter(Context&, const Value& v, Args&) { return v.is_string() && find_filter(v.s) != nullptr; }
bool t_test(Context&, const Value& v, Args&) { return v.is_string() && find_test(v.s) != nullptr; }
bool t_in(Context&, const Value& v, Args& a) { return contains(need(a, "seq"), v); }
bool t_eq(Context&, const Value& v, Args& a) { return equals(v, need(a, "other")); }
bool t_ne(Context&, const Value& v, Args& a) { return !equals(v, need(a, "other")); }
bool t_lt(Context&, const Value& v, Args& a) { return less(v, need(a, "other")); }
bool t_gt(Context&, const Value& v, Args& a) { return less(need(a, "other"), v); }
bool t_le(Context&, const Value& v, Args& a) { return less(v, need(a, "other")) || equals(v, need(a, "other")); }
bool t_ge(Context&, const Value& v, Args& a) { return less(need(a, "other"), v) || equals(v, need(a, "other")); }

/// Python `is`: None/True/False are singletons, small ints are cached, containers by identity.
bool t_sameas(Context&, const Value& v, Args& a) {
  const Value& o = need(a, "other");
  if (v.kind != o.kind) return false;
  switch (v.kind) {
    case Kind::None: case Kind::Undefined: return v.kind == Kind::None;
    case Kind::Bool: return v.b == o.b;
    case Kind::Int: return v.i == o.i && v.i >= -5 && v.i <= 256;
    case Kind::List: return v.list == o.list;
    case Kind::Dict: return v.dict == o.dict;
    case Kind::Function: return v.fn == o.fn;
    default: return false;
  }
}

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = {
      {"odd", t_odd}, {"even", t_even}, {"divisibleby", t_divisibleby}, {"defined", t_defined},
      {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean}, {"false", t_false},
      {"true", t_true}, {"integer", t_integer}, {"float", t_float}, {"number", t_number},
      {"string", t_string}, {"mapping", t_mapping}, {"iterable", t_iterable}, {"sequence", t_sequence},
      {"callable", t_callable}, {"lower", t_lower}, {"upper", t_upper}, {"escaped", t_escaped},
      {"filter", t_filter}, {"test", t_test}, {"in", t_in}, {"sameas", t_sameas},
      {"==", t_eq}, {"eq", t_eq}, {"equalto", t_eq}, {"!=", t_ne}, {"ne", t_ne},
      {"<", t_lt}, {"lt", t_lt}, {"lessthan", t_lt}, {">", t_gt}, {"gt", t_gt}, {"greaterthan", t_gt},
      {"<=", t_le}, {"le", t_le}, {">=", t_ge}, {"ge", t_ge},
  };
  return table;
}

}  // namespace

TestFn find_test(const std::string& name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

}  // namespace fuselm::tmpl
