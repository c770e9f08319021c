// Expression evaluation: names, literals, attribute and item access as jinja2's sandboxed
// getattr/getitem, slicing, calls, filters, tests, operators and conditional expressions.
#include <cmath>

#include "template/builtins.h"
#include "template/chat_template.h"
#include "template/evaluator.h"
#include "template/pystr.h"

namespace fuselm::tmpl {
namespace {

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
}
Value no_element(const Value& obj, const Value& key) {
  return Value::undefined(object_type_repr(obj) + " has no element " + repr(key));
}

std::optional<int64_t> slice_bound(const Value& v) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (v.kind == Kind::Int) return v.i;
  if (v.kind == Kind::Bool) return static_cast<int64_t>(v.b);
  throw TemplateError("slice indices must be integers or None");
}

}  // namespace

Value Context::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  Value m;
  if (find_method(obj, name, m)) return m;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict->find(name)) return *v;
  }
  return no_attribute(obj, name);
}

Value Context::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict() && !obj.dict->namespace_) {
    if (key.is_string()) {
      if (const Value* v = obj.dict->find(key.s)) return *v;
      Value m;
      if (find_method(obj, key.s, m)) return m;
      return no_attribute(obj, key.s);
    }
    return no_element(obj, key);
  }
  if ((obj.is_list() || obj.is_string()) && (key.kind == Kind::Int || key.kind == Kind::Bool)) {
    int64_t i = key.kind == Kind::Bool ? key.b : key.i;
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list->size());
      int64_t j = i < 0 ? i + n : i;
      if (j >= 0 && j < n) return (*obj.list)[static_cast<size_t>(j)];
      return no_element(obj, key);
    }
    if (auto c = pystr::at(obj.s, i)) return Value::string(*c);
    return no_element(obj, key);
  }
  if (key.is_string()) return get_attr(obj, key.s);
  return no_element(obj, key);
}

Value Context::eval(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Const: return e.value;
    case ExprKind::Name: return lookup(e.name);
    case ExprKind::List: case ExprKind::Tuple: {
      List items;
      for (const auto& a : e.args) items.push_back(eval(*a));
      return Value::make_list(std::move(items), e.kind == ExprKind::Tuple);
    }
    case ExprKind::Dict: {
      Value d = Value::make_dict();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k]);
        if (!key.is_string())
          throw TemplateError("line " + std::to_string(e.line) + ": dict keys other than strings are not supported");
        d.dict->set(key.s, eval(*e.args[k + 1]));
      }
      return d;
    }
    case ExprKind::GetAttr: return get_attr(eval(*e.args[0]), e.name);
    case ExprKind::GetItem: {
      Value obj = eval(*e.args[0]);
      return get_item(obj, eval(*e.args[1]));
    }
    case ExprKind::Slice: {
      Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) fail_undefined(obj);
      auto bound = [&](size_t k) { return e.args[k] ? slice_bound(eval(*e.args[k])) : std::nullopt; };
      auto start = bound(1), stop = bound(2), step = bound(3);
      int64_t st = step.value_or(1);
      if (st == 0) throw TemplateError("slice step cannot be zero");
      if (obj.is_string()) return Value::string(pystr::slice(obj.s, start, stop, st));
      if (!obj.is_list()) return Value::undefined("'" + object_type_repr(obj) + "' object is not subscriptable");
      int64_t first = 0, n = 0;
      pystr::adjust_slice(static_cast<int64_t>(obj.list->size()), start, stop, st, first, n);
      List out;
      for (int64_t k = 0; k < n; ++k) out.push_back((*obj.list)[static_cast<size_t>(first + k * st)]);
      return Value::make_list(std::move(out), obj.tuple);
    }
    case ExprKind::Call: {
      Value fn = eval(*e.args[0]);
      Args a = eval_args(e, 1);
      return call(fn, a);
    }
    case ExprKind::Filter: {
      Value v = eval(*e.args[0]);
      Args a = eval_args(e, 1);
      return filter(e.name, v, a);
    }
    case ExprKind::Test: {
      Value v = eval(*e.args[0]);
      Args a = eval_args(e, 1);
      return Value::boolean(test(e.name, v, a) != e.negated);
    }
    case ExprKind::Unary: {
      Value v = eval(*e.args[0]);
      if (e.name == "not") return Value::boolean(!truthy(v));
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number()) throw TemplateError("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
      if (e.name == "+") return v.kind == Kind::Bool ? Value::integer(v.b) : v;
      if (v.kind == Kind::Float) return Value::number(-v.f);
      return Value::integer(-(v.kind == Kind::Bool ? static_cast<int64_t>(v.b) : v.i));
    }
    case ExprKind::Binary: return binary(e);
    case ExprKind::Compare: {
      Value left = eval(*e.args[0]);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.args[k + 1]);
        if (!compare(e.ops[k], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::CondExpr: {
      if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  return Value();
}

Value Context::binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and") {
    Value l = eval(*e.args[0]);
    return truthy(l) ? eval(*e.args[1]) : l;
  }
  if (op == "or") {
    Value l = eval(*e.args[0]);
    return truthy(l) ? l : eval(*e.args[1]);
  }
  Value l = eval(*e.args[0]);
  Value r = eval(*e.args[1]);
  if (op == "~") {
    std::string s = to_str(l);
    std::string t = to_str(r);
    check_size(s.size() + t.size());
    return Value::string(s + t);
  }
  return arithmetic(op, l, r, *this);
}

bool Context::compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return less(a, b) || equals(a, b);
  if (op == ">=") return less(b, a) || equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  throw TemplateError("unknown comparison " + op);
}

}  // namespace fuselm::tmpl
