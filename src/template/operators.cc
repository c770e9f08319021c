// Python's binary arithmetic and `in` as jinja2 evaluates them on template values.
#include <cmath>
#include <limits>

#include "template/chat_template.h"
#include "template/evaluator.h"

namespace fuselm::tmpl {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw TemplateError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

int64_t as_int(const Value& v) { return v.kind == Kind::Bool ? static_cast<int64_t>(v.b) : v.i; }

int64_t checked(bool overflow) {
  if (overflow) throw TemplateError("integer result does not fit in 64 bits (unsupported: Python big integers)");
  return 0;
}

Value repeat(const Value& seq, int64_t n, const Context& ctx) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    ctx.check_size(seq.s.size() * static_cast<size_t>(n));
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return same_kind(seq, std::move(out));
  }
  ctx.check_size(seq.list->size() * static_cast<size_t>(n));
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::make_list(std::move(out), seq.tuple);
}

Value numeric(const std::string& op, const Value& a, const Value& b) {
  const bool flt = a.kind == Kind::Float || b.kind == Kind::Float;
  if (op == "/") {
    if (b.as_double() == 0) throw TemplateError(flt ? "float division by zero" : "division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (flt) {
    double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "**") return Value::number(std::pow(x, y));
    if (y == 0) throw TemplateError(op == "//" ? "float floor division by zero" : "float modulo");
    if (op == "//") return Value::number(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::number(m);
  }
  int64_t x = as_int(a), y = as_int(b), r = 0;
  if (op == "+") return checked(__builtin_add_overflow(x, y, &r)), Value::integer(r);
  if (op == "-") return checked(__builtin_sub_overflow(x, y, &r)), Value::integer(r);
  if (op == "*") return checked(__builtin_mul_overflow(x, y, &r)), Value::integer(r);
  if (op == "**") {
    if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
    int64_t acc = 1;
    for (int64_t k = 0; k < y; ++k) {
      checked(__builtin_mul_overflow(acc, x, &acc));
      if (acc == 0 || acc == 1) break;
    }
    return Value::integer(acc);
  }
  if (y == 0) throw TemplateError(op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
  int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    --q;
    m += y;
  }
  return Value::integer(op == "//" ? q : m);
}

}  // namespace

Value arithmetic(const std::string& op, const Value& a, const Value& b, const Context& ctx) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) return numeric(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      ctx.check_size(a.s.size() + b.s.size());
      if (a.markup || b.markup)  // Markup.__add__/__radd__ escape the plain side
        return Value::markup_string((a.markup ? a.s : html_escape(a.s)) + (b.markup ? b.s : html_escape(b.s)));
      return Value::string(a.s + b.s);
    }
    if (a.is_list() && b.is_list() && a.tuple == b.tuple) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(out), a.tuple);
    }
    if (a.is_string() || b.is_string())
      throw TemplateError(a.is_string() ? "can only concatenate str (not \"" + type_name(b) + "\") to str"
                                        : "unsupported operand type(s) for +: '" + type_name(a) + "' and 'str'");
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.kind == Kind::Int || b.kind == Kind::Bool)) return repeat(a, as_int(b), ctx);
    if ((b.is_string() || b.is_list()) && (a.kind == Kind::Int || a.kind == Kind::Bool)) return repeat(b, as_int(a), ctx);
  }
  if (op == "%" && a.is_string()) throw TemplateError("printf-style '%' string formatting is not supported; use format or ~");
  unsupported(op, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::String:
      if (!item.is_string())
        throw TemplateError("'in <string>' requires string as left operand, not " + type_name(item));
      return container.s.find(item.s) != std::string::npos;
    case Kind::List:
      for (const auto& v : *container.list)
        if (equals(v, item)) return true;
      return false;
    case Kind::Dict:
      if (container.dict->namespace_ || container.dict->loop) break;
      return item.is_string() && container.dict->find(item.s) != nullptr;
    case Kind::Undefined:
      if (container.unsafe) fail_undefined(container);
      return false;
    default: break;
  }
  throw TemplateError("argument of type '" + type_name(container) + "' is not iterable");
}

}  // namespace fuselm::tmpl
