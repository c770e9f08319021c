// The Python str/dict/list methods templates call (`s.strip()`, `d.items()`, ...), bound as
// jinja2's sandbox binds them; methods that mutate are refused as ImmutableSandboxedEnvironment
// refuses them (SecurityError on use).
#include <map>
#include <set>

#include "template/builtins.h"
#include "template/chat_template.h"
#include "template/evaluator.h"
#include "template/pystr.h"

namespace fuselm::tmpl {
namespace {

using Method = Value (*)(Context&, const Value& self, Args& a);

std::optional<std::string> opt_str(const Args& a, size_t k, const char* name) {
  const Value* v = arg(a, k, name);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) throw TemplateError(std::string("argument '") + name + "' must be str or None, not " + type_name(*v));
  return v->s;
}
int64_t int_or(const Args& a, size_t k, const char* name, int64_t fallback) {
  const Value* v = arg(a, k, name);
  if (!v || v->is_none()) return fallback;
  if (v->kind == Kind::Int) return v->i;
  if (v->kind == Kind::Bool) return v->b;
  throw TemplateError(std::string("argument '") + name + "' must be an integer");
}
std::string need_str(const Args& a, size_t k, const char* name) {
  const Value* v = arg(a, k, name);
  if (!v) throw TemplateError(std::string("missing argument '") + name + "'");
  if (!v->is_string()) throw TemplateError("must be str, not " + type_name(*v));
  return v->s;
}
Value str_list(const std::vector<std::string>& parts) {
  List out;
  for (const auto& p : parts) out.push_back(Value::string(p));
  return Value::make_list(std::move(out));
}

Value s_strip(Context&, const Value& s, Args& a) { return same_kind(s, pystr::strip(s.s, opt_str(a, 0, "chars"), true, true)); }
Value s_lstrip(Context&, const Value& s, Args& a) { return same_kind(s, pystr::strip(s.s, opt_str(a, 0, "chars"), true, false)); }
Value s_rstrip(Context&, const Value& s, Args& a) { return same_kind(s, pystr::strip(s.s, opt_str(a, 0, "chars"), false, true)); }
Value s_split(Context&, const Value& s, Args& a) {
  try {
    return str_list(pystr::split(s.s, opt_str(a, 0, "sep"), int_or(a, 1, "maxsplit", -1)));
  } catch (const std::invalid_argument&) {
    throw TemplateError("empty separator");
  }
}
Value s_rsplit(Context&, const Value& s, Args& a) {
  try {
    return str_list(pystr::rsplit(s.s, opt_str(a, 0, "sep"), int_or(a, 1, "maxsplit", -1)));
  } catch (const std::invalid_argument&) {
    throw TemplateError("empty separator");
  }
}
Value s_splitlines(Context&, const Value& s, Args& a) {
  const Value* k = arg(a, 0, "keepends");
  return str_list(pystr::splitlines(s.s, k && truthy(*k)));
}
Value affix(const Value& s, Args& a, bool start) {
  const Value* p = arg(a, 0, "prefix");
  if (!p) throw TemplateError(start ? "startswith() takes at least 1 argument" : "endswith() takes at least 1 argument");
  std::optional<int64_t> b, e;
  if (const Value* x = arg(a, 1, "start"); x && !x->is_none()) b = x->i;
  if (const Value* x = arg(a, 2, "end"); x && !x->is_none()) e = x->i;
  std::string sub = (b || e) ? pystr::slice(s.s, b, e, 1) : s.s;
  List cands = p->is_list() ? *p->list : List{*p};
  for (const auto& c : cands) {
    if (!c.is_string())
      throw TemplateError(std::string(start ? "startswith" : "endswith") + " first arg must be str or a tuple of str, not " + type_name(c));
    if (start ? sub.compare(0, c.s.size(), c.s) == 0 && sub.size() >= c.s.size()
              : sub.size() >= c.s.size() && sub.compare(sub.size() - c.s.size(), c.s.size(), c.s) == 0)
      return Value::boolean(true);
  }
  return Value::boolean(false);
}
Value s_startswith(Context&, const Value& s, Args& a) { return affix(s, a, true); }
Value s_endswith(Context&, const Value& s, Args& a) { return affix(s, a, false); }
Value s_replace(Context&, const Value& s, Args& a) {
  return Value::string(pystr::replace(s.s, need_str(a, 0, "old"), need_str(a, 1, "new"), int_or(a, 2, "count", -1)));
}
Value s_upper(Context&, const Value& s, Args&) { return same_kind(s, pystr::upper(s.s)); }
Value s_lower(Context&, const Value& s, Args&) { return same_kind(s, pystr::lower(s.s)); }
Value s_title(Context&, const Value& s, Args&) { return same_kind(s, pystr::title(s.s)); }
Value s_capitalize(Context&, const Value& s, Args&) { return same_kind(s, pystr::capitalize(s.s)); }
Value s_find(Context&, const Value& s, Args& a) { return Value::integer(pystr::find(s.s, need_str(a, 0, "sub"))); }
Value s_rfind(Context&, const Value& s, Args& a) {
  std::string sub = need_str(a, 0, "sub");
  size_t j = s.s.rfind(sub);
  return Value::integer(j == std::string::npos ? -1 : static_cast<int64_t>(pystr::length(std::string_view(s.s).substr(0, j))));
}
Value s_count(Context&, const Value& s, Args& a) { return Value::integer(pystr::count(s.s, need_str(a, 0, "x"))); }
Value s_join(Context& ctx, const Value& s, Args& a) {
  const Value* it = arg(a, 0, "iterable");
  if (!it) throw TemplateError("join() takes exactly one argument");
  std::string out;
  bool first = true;
  for (const auto& x : iterate(*it)) {
    if (!x.is_string()) throw TemplateError("sequence item: expected str instance, " + type_name(x) + " found");
    if (!first) out += s.s;
    first = false;
    out += x.s;
    ctx.check_size(out.size());
  }
  return Value::string(out);
}
Value s_removeprefix(Context&, const Value& s, Args& a) {
  std::string p = need_str(a, 0, "prefix");
  return Value::string(s.s.compare(0, p.size(), p) == 0 && s.s.size() >= p.size() ? s.s.substr(p.size()) : s.s);
}
Value s_removesuffix(Context&, const Value& s, Args& a) {
  std::string p = need_str(a, 0, "suffix");
  bool ends = !p.empty() && s.s.size() >= p.size() && s.s.compare(s.s.size() - p.size(), p.size(), p) == 0;
  return Value::string(ends ? s.s.substr(0, s.s.size() - p.size()) : s.s);
}
template <bool (*Pred)(char32_t)>
Value s_is(Context&, const Value& s, Args&) {
  std::u32string u = pystr::decode(s.s);
  if (u.empty()) return Value::boolean(false);
  for (char32_t c : u)
    if (!Pred(c)) return Value::boolean(false);
  return Value::boolean(true);
}
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_alpha(char32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
bool is_alnum(char32_t c) { return is_digit(c) || is_alpha(c); }
Value s_isspace(Context& c, const Value& s, Args& a) { return s_is<pystr::is_space>(c, s, a); }
Value s_islower(Context&, const Value& s, Args&) { return Value::boolean(pystr::is_lower(s.s)); }
Value s_isupper(Context&, const Value& s, Args&) { return Value::boolean(pystr::is_upper(s.s)); }

/// str.format with automatic/numbered/named fields and no format specs.
Value s_format(Context&, const Value& s, Args& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < s.s.size(); ++k) {
    char c = s.s[k];
    if (c == '{' && k + 1 < s.s.size() && s.s[k + 1] == '{') { out.push_back('{'); ++k; continue; }
    if (c == '}' && k + 1 < s.s.size() && s.s[k + 1] == '}') { out.push_back('}'); ++k; continue; }
    if (c != '{') { out.push_back(c); continue; }
    size_t e = s.s.find('}', k);
    if (e == std::string::npos) throw TemplateError("Single '{' encountered in format string");
    std::string field = s.s.substr(k + 1, e - k - 1);
    if (field.find_first_of(":!.[") != std::string::npos) throw TemplateError("str.format: format specs, conversions and field access are not supported");
    const Value* v = nullptr;
    if (field.empty()) v = auto_idx < a.pos.size() ? &a.pos[auto_idx++] : nullptr;
    else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t i = std::stoul(field);
      v = i < a.pos.size() ? &a.pos[i] : nullptr;
    } else {
      for (const auto& [n, x] : a.kw)
        if (n == field) v = &x;
    }
    if (!v) throw TemplateError("str.format: no argument for field '{" + field + "}'");
    out += to_str(*v);
    k = e;
  }
  return Value::string(out);
}

Value d_items(Context&, const Value& d, Args&) {
  List out;
  for (const auto& [k, v] : d.dict->items) out.push_back(Value::make_list({Value::string(k), v}, true));
  return Value::make_list(std::move(out));
}
Value d_keys(Context&, const Value& d, Args&) {
  List out;
  for (const auto& kv : d.dict->items) out.push_back(Value::string(kv.first));
  return Value::make_list(std::move(out));
}
Value d_values(Context&, const Value& d, Args&) {
  List out;
  for (const auto& kv : d.dict->items) out.push_back(kv.second);
  return Value::make_list(std::move(out));
}
Value d_get(Context&, const Value& d, Args& a) {
  if (a.pos.empty()) throw TemplateError("get expected at least 1 argument, got 0");
  Value fallback = a.pos.size() > 1 ? a.pos[1] : Value::none();
  if (!a.pos[0].is_string()) return fallback;
  const Value* v = d.dict->find(a.pos[0].s);
  return v ? *v : fallback;
}
Value d_copy(Context&, const Value& d, Args&) {
  Value c = Value::make_dict();
  c.dict->items = d.dict->items;
  return c;
}
Value l_index(Context&, const Value& l, Args& a) {
  if (a.pos.empty()) throw TemplateError("index expected 1 argument");
  for (size_t k = 0; k < l.list->size(); ++k)
    if (equals((*l.list)[k], a.pos[0])) return Value::integer(static_cast<int64_t>(k));
  throw TemplateError(repr(a.pos[0]) + " is not in list");
}
Value l_count(Context&, const Value& l, Args& a) {
  if (a.pos.empty()) throw TemplateError("count expected 1 argument");
  int64_t n = 0;
  for (const auto& x : *l.list) n += equals(x, a.pos[0]);
  return Value::integer(n);
}

const std::map<std::string, Method>& str_methods() {
  static const std::map<std::string, Method> m = {
      {"strip", s_strip}, {"lstrip", s_lstrip}, {"rstrip", s_rstrip}, {"split", s_split}, {"rsplit", s_rsplit},
      {"splitlines", s_splitlines}, {"startswith", s_startswith}, {"endswith", s_endswith}, {"replace", s_replace},
      {"upper", s_upper}, {"lower", s_lower}, {"title", s_title}, {"capitalize", s_capitalize}, {"find", s_find},
      {"rfind", s_rfind}, {"count", s_count}, {"join", s_join}, {"format", s_format},
      {"removeprefix", s_removeprefix}, {"removesuffix", s_removesuffix}, {"isdigit", s_is<is_digit>},
      {"isalpha", s_is<is_alpha>}, {"isalnum", s_is<is_alnum>}, {"isspace", s_isspace}, {"islower", s_islower},
      {"isupper", s_isupper},
  };
  return m;
}
const std::map<std::string, Method>& dict_methods() {
  static const std::map<std::string, Method> m = {
      {"items", d_items}, {"keys", d_keys}, {"values", d_values}, {"get", d_get}, {"copy", d_copy}};
  return m;
}
const std::map<std::string, Method>& list_methods() {
  static const std::map<std::string, Method> m = {{"index", l_index}, {"count", l_count}};
  return m;
}

Value bind(const Value& self, const std::string& name, Method m) {
  return Value::function(name, [self, m](Context& ctx, Args& a) { return m(ctx, self, a); }, "builtin_function_or_method");
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
}

}  // namespace

bool find_method(const Value& obj, const std::string& name, Value& out) {
  static const std::set<std::string> str_other = {  // exist on str, not provided here
      "casefold", "center", "encode", "expandtabs", "format_map", "index", "isascii", "isdecimal",
      "isidentifier", "isnumeric", "isprintable", "istitle", "ljust", "maketrans", "partition", "rindex",
      "rjust", "rpartition", "swapcase", "translate", "zfill"};
  static const std::set<std::string> dict_mutators = {"pop", "popitem", "update", "setdefault", "clear", "fromkeys"};
  static const std::set<std::string> list_mutators = {"append", "extend", "insert", "pop", "remove", "reverse", "sort",
                                                      "clear"};
  if (!name.empty() && name[0] == '_' && (obj.is_string() || obj.is_list() || obj.is_dict()) &&
      name.size() > 1 && name[1] == '_') {
    out = unsafe(obj, name);
    return true;
  }
  if (obj.is_string()) {
    auto it = str_methods().find(name);
    if (it != str_methods().end()) return out = bind(obj, name, it->second), true;
    if (str_other.count(name)) throw TemplateError("str." + name + "() is not supported by fuselm's template renderer");
  } else if (obj.is_dict() && !obj.dict->namespace_ && !obj.dict->loop) {
    auto it = dict_methods().find(name);
    if (it != dict_methods().end()) return out = bind(obj, name, it->second), true;
    if (dict_mutators.count(name)) return out = unsafe(obj, name), true;
  } else if (obj.is_list() && !obj.tuple) {
    auto it = list_methods().find(name);
    if (it != list_methods().end()) return out = bind(obj, name, it->second), true;
    if (list_mutators.count(name)) return out = unsafe(obj, name), true;
  } else if (obj.is_list()) {
    auto it = list_methods().find(name);
    if (it != list_methods().end()) return out = bind(obj, name, it->second), true;
  }
  return false;
}

}  // namespace fuselm::tmpl
