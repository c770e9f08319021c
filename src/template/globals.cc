// The global functions of transformers' jinja2 environment: jinja2's range (with the sandbox's
// size bound), namespace, dict, cycler, joiner, and transformers' raise_exception and strftime_now.
#include <ctime>
#include <map>

#include "template/builtins.h"
#include "template/chat_template.h"
#include "template/evaluator.h"

namespace fuselm::tmpl {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

int64_t int_of(const Value& v) {
  if (v.kind == Kind::Int) return v.i;
  if (v.kind == Kind::Bool) return v.b;
  if (v.is_undefined()) fail_undefined(v);
  throw TemplateError("'" + type_name(v) + "' object cannot be interpreted as an integer");
}

Value g_range(Context&, Args& a) {
  if (a.pos.empty() || a.pos.size() > 3) throw TemplateError("range expected 1 to 3 arguments");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) stop = int_of(a.pos[0]);
  else {
    start = int_of(a.pos[0]);
    stop = int_of(a.pos[1]);
    if (a.pos.size() == 3) step = int_of(a.pos[2]);
  }
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                       : (start > stop ? (start - stop - step - 1) / (-step) : 0);
  if (n > kMaxRange)
    throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  List out;
  for (int64_t k = 0; k < n; ++k) out.push_back(Value::integer(start + k * step));
  return Value::make_list(std::move(out));
}

Value fill(Value d, Args& a, const char* what) {
  for (const auto& p : a.pos) {
    if (!p.is_dict()) throw TemplateError(std::string(what) + "() positional argument must be a mapping");
    for (const auto& [k, v] : p.dict->items) d.dict->set(k, v);
  }
  for (const auto& [k, v] : a.kw) d.dict->set(k, v);
  return d;
}

Value g_namespace(Context&, Args& a) {
  Value d = Value::make_dict();
  d.dict->namespace_ = true;
  return fill(d, a, "namespace");
}

Value g_dict(Context&, Args& a) { return fill(Value::make_dict(), a, "dict"); }

Value g_raise_exception(Context&, Args& a) {
  throw TemplateError(a.pos.empty() ? std::string() : to_str(a.pos[0]));
}

Value g_strftime_now(Context&, Args& a) {
  if (a.pos.empty() || !a.pos[0].is_string()) throw TemplateError("strftime_now(format) needs a format string");
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[512];
  size_t n = std::strftime(buf, sizeof buf, a.pos[0].s.c_str(), &tm);
  return Value::string(std::string(buf, n));
}

Value g_joiner(Context&, Args& a) {
  std::string sep = a.pos.empty() ? ", " : to_str(a.pos[0]);
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [sep, used](Context&, Args&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  }, "jinja2.utils.Joiner");
}

using Global = Value (*)(Context&, Args&);
const std::map<std::string, Global>& globals() {
  static const std::map<std::string, Global> table = {
      {"range", g_range}, {"namespace", g_namespace}, {"dict", g_dict}, {"joiner", g_joiner},
      {"raise_exception", g_raise_exception}, {"strftime_now", g_strftime_now}};
  return table;
}

}  // namespace

Value find_global(const std::string& name) {
  auto it = globals().find(name);
  if (it == globals().end()) return Value();
  return Value::function(name, it->second, "function");
}

}  // namespace fuselm::tmpl
