#include "template/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "template/chat_template.h"
#include "template/pystr.h"

namespace fuselm::tmpl {

Value Value::undefined(std::string message, bool unsafe) {
  Value v;
  v.s = std::move(message);
  v.unsafe = unsafe;
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String;
  v.s = std::move(x);
  return v;
}
Value Value::markup_string(std::string x) {
  Value v = string(std::move(x));
  v.markup = true;
  return v;
}
Value same_kind(const Value& like, std::string s) {
  return like.markup ? Value::markup_string(std::move(s)) : Value::string(std::move(s));
}
std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}
Value Value::make_list(List items, bool tuple) {
  Value v;
  v.kind = Kind::List;
  v.tuple = tuple;
  v.list = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::make_dict() {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>();
  return v;
}
Value Value::function(std::string name, std::function<Value(Context&, Args&)> call, std::string type_name) {
  Value v;
  v.kind = Kind::Function;
  v.fn = std::make_shared<Function>(Function{std::move(name), std::move(type_name), std::move(call)});
  return v;
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

void fail_undefined(const Value& v) { throw TemplateError(v.s); }

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i != 0;
    case Kind::Float: return v.f != 0;
    case Kind::String: return !v.s.empty();
    case Kind::List: return !v.list->empty();
    case Kind::Dict: return v.dict->namespace_ || v.dict->loop || !v.dict->items.empty();
    case Kind::Function: return true;
  }
  return false;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+17": shortest round-trip digits
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : sci.substr(0, epos))
    if (c != '.') digits.push_back(c);
  std::string out;
  if (exp >= -4 && exp < 16) {  // Python's repr uses exponent form outside [1e-4, 1e16)
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += e;
  }
  return neg ? "-" + out : out;
}

namespace {
std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back(q);
  return out;
}
}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Kind::String: return repr_string(v.s);
    case Kind::List: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Kind::Dict: {
      if (v.dict->namespace_) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        out += (first ? "" : ", ") + repr_string(k) + ": " + repr(x);
        first = false;
      }
      return out + "}";
    }
    case Kind::Undefined: return "Undefined";
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: return float_repr(v.f);
    case Kind::String: return v.s;
    case Kind::Function: return "<" + v.fn->type_name + " " + v.fn->name + ">";
    default: return repr(v);
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
    return (a.kind == Kind::Bool ? a.b : a.i) == (b.kind == Kind::Bool ? b.b : b.i);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined: case Kind::None: return true;
    case Kind::String: return a.s == b.s;
    case Kind::List: {
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equals((*a.list)[k], (*b.list)[k])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.dict == b.dict) return true;
      if (a.dict->namespace_ || b.dict->namespace_ || a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, x] : a.dict->items) {
        const Value* y = b.dict->find(k);
        if (!y || !equals(x, *y)) return false;
      }
      return true;
    }
    case Kind::Function: return a.fn == b.fn;
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() < b.as_double();
    return (a.kind == Kind::Bool ? a.b : a.i) < (b.kind == Kind::Bool ? b.b : b.i);
  }
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list() && a.tuple == b.tuple) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
      if (!equals((*a.list)[k], (*b.list)[k])) return less((*a.list)[k], (*b.list)[k]);
    }
    return a.list->size() < b.list->size();
  }
  throw TemplateError("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return v.tuple ? "tuple" : "list";
    case Kind::Dict: return v.dict->namespace_ ? "Namespace" : v.dict->loop ? "LoopContext" : "dict";
    case Kind::Function: return v.fn->type_name;
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_dict() && v.dict->namespace_) return "jinja2.utils.Namespace object";
  if (v.is_dict() && v.dict->loop) return "jinja2.runtime.LoopContext object";
  if (v.kind == Kind::Function) return v.fn->type_name + " object";
  return type_name(v) + " object";
}

int64_t length(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return 0;
    case Kind::String: return static_cast<int64_t>(pystr::decode(v.s).size());
    case Kind::List: return static_cast<int64_t>(v.list->size());
    case Kind::Dict:
      if (v.dict->loop) break;
      return static_cast<int64_t>(v.dict->items.size());
    default: break;
  }
  throw TemplateError("object of type '" + type_name(v) + "' has no len()");
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      if (v.unsafe) fail_undefined(v);
      return {};
    case Kind::List: return *v.list;
    case Kind::Dict: {
      if (v.dict->namespace_ || v.dict->loop) break;
      List keys;
      for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Kind::String: {
      List chars;
      for (char32_t c : pystr::decode(v.s)) chars.push_back(Value::string(pystr::encode(std::u32string(1, c))));
      return chars;
    }
    default: break;
  }
  throw TemplateError("'" + type_name(v) + "' object is not iterable");
}

}  // namespace fuselm::tmpl
