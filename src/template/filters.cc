// jinja2's built-in filters (jinja2/filters.py, 3.1) and transformers' tojson.
#include <algorithm>
#include <cmath>
#include <map>
#include <utf8proc.h>

#include "template/builtins.h"
#include "template/chat_template.h"
#include "template/evaluator.h"
#include "template/json.h"
#include "template/pystr.h"

namespace fuselm::tmpl {

const Value* arg(const Args& a, size_t k, const char* name) {
  if (k < a.pos.size()) return &a.pos[k];
  for (const auto& [n, v] : a.kw)
    if (n == name) return &v;
  return nullptr;
}

Value arg_or(const Args& a, size_t k, const char* name, Value fallback) {
  const Value* v = arg(a, k, name);
  return v ? *v : fallback;
}

namespace {

int64_t int_arg(const Args& a, size_t k, const char* name, int64_t fallback) {
  const Value* v = arg(a, k, name);
  if (!v || v->is_none()) return fallback;
  if (v->kind == Kind::Int) return v->i;
  if (v->kind == Kind::Bool) return v->b;
  throw TemplateError(std::string("filter argument '") + name + "' must be an integer");
}
bool bool_arg(const Args& a, size_t k, const char* name, bool fallback) {
  const Value* v = arg(a, k, name);
  return v ? truthy(*v) : fallback;
}
std::optional<std::string> opt_str(const Args& a, size_t k, const char* name) {
  const Value* v = arg(a, k, name);
  if (!v || v->is_none()) return std::nullopt;
  return to_str(*v);
}

/// jinja2's make_attrgetter: "a.b.0" looked up item by item (environment.getitem).
Value attr_path(Context& ctx, const Value& item, const std::string& path) {
  Value cur = item;
  size_t b = 0;
  while (b <= path.size()) {
    size_t e = std::min(path.find('.', b), path.size());
    std::string part = path.substr(b, e - b);
    Value key = Value::string(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) key = Value::integer(std::stoll(part));
    if (cur.is_undefined()) fail_undefined(cur);
    if (cur.is_dict() && key.is_string()) {
      const Value* v = cur.dict->find(key.s);
      if (v) cur = *v;
      else cur = Value::undefined("'" + object_type_repr(cur) + "' has no attribute '" + part + "'");
    } else if (cur.is_list() && key.kind == Kind::Int) {
      int64_t n = static_cast<int64_t>(cur.list->size()), i = key.i < 0 ? key.i + n : key.i;
      cur = i >= 0 && i < n ? (*cur.list)[static_cast<size_t>(i)] : Value::undefined(object_type_repr(cur) + " has no element " + part);
    } else {
      Value m;
      if (key.is_string() && find_method(cur, key.s, m)) cur = m;
      else cur = Value::undefined("'" + object_type_repr(cur) + "' has no attribute '" + part + "'");
    }
    b = e + 1;
  }
  (void)ctx;
  return cur;
}

Value lower_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::string(pystr::lower(v.s)) : v;
}

Value f_abs(Context&, const Value& v, Args&) {
  if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
  if (v.kind == Kind::Int) return Value::integer(v.i < 0 ? -v.i : v.i);
  if (v.kind == Kind::Bool) return Value::integer(v.b);
  if (v.is_undefined()) fail_undefined(v);
  throw TemplateError("bad operand type for abs(): '" + type_name(v) + "'");
}
// String filters call soft_str(): a Markup stays Markup through its own methods.
Value f_capitalize(Context&, const Value& v, Args&) { return same_kind(v, pystr::capitalize(to_str(v))); }
Value f_lower(Context&, const Value& v, Args&) { return same_kind(v, pystr::lower(to_str(v))); }
Value f_upper(Context&, const Value& v, Args&) { return same_kind(v, pystr::upper(to_str(v))); }
Value f_title(Context&, const Value& v, Args&) { return same_kind(v, pystr::title(to_str(v))); }
Value f_string(Context&, const Value& v, Args&) { return same_kind(v, to_str(v)); }
Value f_safe(Context&, const Value& v, Args&) { return Value::markup_string(to_str(v)); }
Value f_trim(Context&, const Value& v, Args& a) {
  return same_kind(v, pystr::strip(to_str(v), opt_str(a, 0, "chars"), true, true));
}
Value f_length(Context&, const Value& v, Args&) { return Value::integer(length(v)); }

Value f_default(Context&, const Value& v, Args& a) {
  Value def = arg_or(a, 0, "default_value", Value::string(""));
  bool boolean = bool_arg(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) return def;
  return v;
}

Value f_escape(Context&, const Value& v, Args&) {
  if (v.markup) return v;
  return Value::markup_string(html_escape(to_str(v)));
}

Value f_first(Context&, const Value& v, Args&) {
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}
Value f_last(Context&, const Value& v, Args&) {
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}
Value f_list(Context&, const Value& v, Args&) { return Value::make_list(iterate(v)); }
Value f_reverse(Context&, const Value& v, Args&) {
  if (v.is_string()) return Value::string(pystr::slice(v.s, std::nullopt, std::nullopt, -1));
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::make_list(std::move(items));
}

std::optional<double> parse_float(const std::string& s) {
  std::string t = pystr::strip(s, std::nullopt, true, true);
  std::string u;
  for (char c : t)
    if (c != '_') u.push_back(c);
  if (u.empty()) return std::nullopt;
  std::string l = pystr::lower(u);
  if (l == "inf" || l == "+inf" || l == "infinity" || l == "+infinity") return INFINITY;
  if (l == "-inf" || l == "-infinity") return -INFINITY;
  if (l == "nan" || l == "+nan" || l == "-nan") return NAN;
  size_t used = 0;
  try {
    double d = std::stod(u, &used);
    if (used != u.size() || l.find('x') != std::string::npos) return std::nullopt;
    return d;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

Value f_float(Context&, const Value& v, Args& a) {
  Value def = arg_or(a, 0, "default", Value::number(0.0));
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string())
    if (auto d = parse_float(v.s)) return Value::number(*d);
  return def;
}

Value f_int(Context&, const Value& v, Args& a) {
  Value def = arg_or(a, 0, "default", Value::integer(0));
  int64_t base = int_arg(a, 1, "base", 10);
  if (v.kind == Kind::Int) return v;
  if (v.kind == Kind::Bool) return Value::integer(v.b);
  if (v.kind == Kind::Float) {
    if (std::isfinite(v.f) && std::fabs(v.f) < 9.2e18) return Value::integer(static_cast<int64_t>(v.f));
    return def;
  }
  if (v.is_string()) {
    std::string t = pystr::strip(v.s, std::nullopt, true, true), u;
    for (char c : t)
      if (c != '_') u.push_back(c);
    try {
      size_t used = 0;
      long long x = std::stoll(u, &used, static_cast<int>(base));
      if (used == u.size() && !u.empty()) return Value::integer(x);
    } catch (const std::exception&) {
    }
    if (auto d = parse_float(v.s); d && std::isfinite(*d)) return Value::integer(static_cast<int64_t>(*d));
  }
  return def;
}

Value f_round(Context&, const Value& v, Args& a) {
  int64_t precision = int_arg(a, 0, "precision", 0);
  std::string method = to_str(arg_or(a, 1, "method", Value::string("common")));
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) throw TemplateError("type " + type_name(v) + " doesn't define __round__ method");
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "common") {
    if (v.kind != Kind::Float) return Value::integer(v.kind == Kind::Bool ? v.b : v.i);
    return Value::number(std::nearbyint(v.f * scale) / scale);
  }
  if (method == "ceil") return Value::number(std::ceil(v.as_double() * scale) / scale);
  if (method == "floor") return Value::number(std::floor(v.as_double() * scale) / scale);
  throw TemplateError("method must be common, ceil or floor");
}

Value f_replace(Context&, const Value& v, Args& a) {
  const Value* old = arg(a, 0, "old");
  const Value* repl = arg(a, 1, "new");
  if (!old || !repl) throw TemplateError("replace() needs old and new");
  int64_t count = int_arg(a, 2, "count", -1);
  return Value::string(pystr::replace(to_str(v), to_str(*old), to_str(*repl), count));
}

Value f_join(Context& ctx, const Value& v, Args& a) {
  std::string sep = to_str(arg_or(a, 0, "d", Value::string("")));
  auto attribute = opt_str(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute ? attr_path(ctx, item, *attribute) : item);
    ctx.check_size(out.size());
  }
  return Value::string(out);
}

Value f_items(Context&, const Value& v, Args&) {
  if (v.is_undefined()) return Value::make_list();
  if (!v.is_dict() || v.dict->namespace_ || v.dict->loop) throw TemplateError("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, x] : v.dict->items) out.push_back(Value::make_list({Value::string(k), x}, true));
  return Value::make_list(std::move(out));
}

Value f_dictsort(Context&, const Value& v, Args& a) {
  bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
  std::string by = to_str(arg_or(a, 1, "by", Value::string("key")));
  bool reverse = bool_arg(a, 2, "reverse", false);
  if (!v.is_dict()) throw TemplateError("dictsort needs a mapping");
  if (by != "key" && by != "value") throw TemplateError("You can only sort by either \"key\" or \"value\"");
  List items;
  for (const auto& [k, x] : v.dict->items) items.push_back(Value::make_list({Value::string(k), x}, true));
  size_t pos = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = lower_key((*x.list)[pos], case_sensitive), ky = lower_key((*y.list)[pos], case_sensitive);
    return reverse ? less(ky, kx) : less(kx, ky);
  });
  return Value::make_list(std::move(items));
}

Value f_sort(Context& ctx, const Value& v, Args& a) {
  bool reverse = bool_arg(a, 0, "reverse", false);
  bool case_sensitive = bool_arg(a, 1, "case_sensitive", false);
  auto attribute = opt_str(a, 2, "attribute");
  List items = iterate(v);
  auto key = [&](const Value& x) { return lower_key(attribute ? attr_path(ctx, x, *attribute) : x, case_sensitive); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less(key(y), key(x)) : less(key(x), key(y));
  });
  return Value::make_list(std::move(items));
}

Value f_unique(Context& ctx, const Value& v, Args& a) {
  bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
  auto attribute = opt_str(a, 1, "attribute");
  List out, seen;
  for (const auto& item : iterate(v)) {
    Value k = lower_key(attribute ? attr_path(ctx, item, *attribute) : item, case_sensitive);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
      seen.push_back(k);
      out.push_back(item);
    }
  }
  return Value::make_list(std::move(out));
}

Value min_max(Context& ctx, const Value& v, Args& a, bool want_max) {
  bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
  auto attribute = opt_str(a, 1, "attribute");
  List items = iterate(v);
  if (items.empty()) return Value::undefined(want_max ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) { return lower_key(attribute ? attr_path(ctx, x, *attribute) : x, case_sensitive); };
  Value best = items[0];
  for (size_t k = 1; k < items.size(); ++k)
    if (want_max ? less(key(best), key(items[k])) : less(key(items[k]), key(best))) best = items[k];
  return best;
}
Value f_max(Context& ctx, const Value& v, Args& a) { return min_max(ctx, v, a, true); }
Value f_min(Context& ctx, const Value& v, Args& a) { return min_max(ctx, v, a, false); }

Value f_sum(Context& ctx, const Value& v, Args& a) {
  auto attribute = opt_str(a, 0, "attribute");
  Value acc = arg_or(a, 1, "start", Value::integer(0));
  for (const auto& item : iterate(v)) acc = arithmetic("+", acc, attribute ? attr_path(ctx, item, *attribute) : item, ctx);
  return acc;
}

Value f_map(Context& ctx, const Value& v, Args& a) {
  List out;
  if (!truthy(v)) return Value::make_list();  // jinja2: `if value:` before iterating
  const Value* attribute = nullptr;
  const Value* def = nullptr;
  for (const auto& [n, x] : a.kw) {
    if (n == "attribute") attribute = &x;
    if (n == "default") def = &x;
  }
  if (attribute && a.pos.empty()) {
    for (const auto& item : iterate(v)) {
      Value x = attr_path(ctx, item, to_str(*attribute));
      out.push_back(x.is_undefined() && def ? *def : x);
    }
    return Value::make_list(std::move(out));
  }
  if (a.pos.empty()) throw TemplateError("map requires a filter argument");
  std::string name = to_str(a.pos[0]);
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const auto& item : iterate(v)) {
    Args copy = rest;
    out.push_back(ctx.filter(name, item, copy));
  }
  return Value::make_list(std::move(out));
}

/// select/reject/selectattr/rejectattr: keep items whose test (or truthiness) equals `keep`.
Value select_impl(Context& ctx, const Value& v, Args& a, bool keep, bool by_attr) {
  if (!truthy(v)) return Value::make_list();  // jinja2: `if value:` before iterating
  size_t k = 0;
  std::optional<std::string> attribute;
  if (by_attr) {
    if (a.pos.empty()) throw TemplateError("Missing parameter for attribute name");
    attribute = to_str(a.pos[0]);
    k = 1;
  }
  std::optional<std::string> test;
  Args rest;
  if (a.pos.size() > k) {
    test = to_str(a.pos[k]);
    rest.pos.assign(a.pos.begin() + static_cast<long>(k) + 1, a.pos.end());
    rest.kw = a.kw;
  }
  List out;
  for (const auto& item : iterate(v)) {
    Value x = attribute ? attr_path(ctx, item, *attribute) : item;
    Args copy = rest;
    bool ok = test ? ctx.test(*test, x, copy) : truthy(x);
    if (ok == keep) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}
Value f_select(Context& c, const Value& v, Args& a) { return select_impl(c, v, a, true, false); }
Value f_reject(Context& c, const Value& v, Args& a) { return select_impl(c, v, a, false, false); }
Value f_selectattr(Context& c, const Value& v, Args& a) { return select_impl(c, v, a, true, true); }
Value f_rejectattr(Context& c, const Value& v, Args& a) { return select_impl(c, v, a, false, true); }

Value f_indent(Context&, const Value& v, Args& a) {
  const Value* w = arg(a, 0, "width");
  std::string ind = w && w->is_string() ? w->s : std::string(static_cast<size_t>(std::max<int64_t>(0, w ? (w->kind == Kind::Bool ? w->b : w->i) : 4)), ' ');
  bool first = bool_arg(a, 1, "first", false);
  bool blank = bool_arg(a, 2, "blank", false);
  std::string s = to_str(v) + "\n";  // jinja2's quirk so that splitlines keeps a final empty line
  auto lines = pystr::splitlines(s);
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind + lines[k]);
  }
  if (first) rv = ind + rv;
  return same_kind(v, rv);
}

Value f_wordcount(Context&, const Value& v, Args&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : pystr::decode(to_str(v))) {
    auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    bool w = c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
             (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) || cat == UTF8PROC_CATEGORY_MN ||
             cat == UTF8PROC_CATEGORY_MC;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_tojson(Context&, const Value& v, Args& a) {
  DumpOptions o;
  o.ensure_ascii = bool_arg(a, 0, "ensure_ascii", false);
  const Value* indent = arg(a, 1, "indent");
  if (indent && !indent->is_none()) {
    if (indent->is_string()) o.indent = indent->s;
    else o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent->kind == Kind::Bool ? indent->b : indent->i)), ' ');
    o.item_sep = ",";
  }
  const Value* seps = arg(a, 2, "separators");
  if (seps && !seps->is_none()) {
    List s = iterate(*seps);
    if (s.size() != 2) throw TemplateError("tojson separators must be (item_separator, key_separator)");
    o.item_sep = to_str(s[0]);
    o.key_sep = to_str(s[1]);
  }
  o.sort_keys = bool_arg(a, 3, "sort_keys", false);
  return Value::string(dumps(v, o));
}

Value f_center(Context&, const Value& v, Args& a) {
  int64_t width = int_arg(a, 0, "width", 80);
  std::u32string u = pystr::decode(to_str(v));
  if (static_cast<int64_t>(u.size()) >= width) return Value::string(to_str(v));
  int64_t pad = width - static_cast<int64_t>(u.size());
  int64_t left = pad / 2 + (pad & width & 1);
  return Value::string(std::string(static_cast<size_t>(left), ' ') + to_str(v) + std::string(static_cast<size_t>(pad - left), ' '));
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = {
      {"abs", f_abs}, {"capitalize", f_capitalize}, {"center", f_center}, {"count", f_length},
      {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"indent", f_indent},
      {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length},
      {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
      {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
      {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr},
      {"sort", f_sort}, {"string", f_string}, {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson},
      {"trim", f_trim}, {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

}  // namespace fuselm::tmpl
