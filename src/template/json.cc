#include "template/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "template/chat_template.h"
#include "template/pystr.h"

namespace fuselm::tmpl {
namespace {

template <class J>
Value convert(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw TemplateError("JSON integer " + std::to_string(u) + " does not fit in 64 bits");
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      for (const auto& x : j) items.push_back(convert(x));
      return Value::make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::make_dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.dict->items.emplace_back(it.key(), convert(it.value()));
      return d;
    }
    default: throw TemplateError("unsupported JSON value (binary)");
  }
}

void dump_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  auto hex4 = [&](uint32_t c) {
    char b[8];
    std::snprintf(b, sizeof b, "\\u%04x", c);
    out += b;
  };
  if (!ensure_ascii) {
    for (unsigned char c : s) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) hex4(c);
          else out.push_back(static_cast<char>(c));
      }
    }
  } else {
    for (char32_t c : pystr::decode(s)) {
      if (c == '"') out += "\\\"";
      else if (c == '\\') out += "\\\\";
      else if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else if (c == '\t') out += "\\t";
      else if (c == '\b') out += "\\b";
      else if (c == '\f') out += "\\f";
      else if (c < 0x20 || (c > 0x7e && c < 0x10000)) hex4(c);
      else if (c >= 0x10000) {
        uint32_t v = c - 0x10000;
        hex4(0xD800 + (v >> 10));
        hex4(0xDC00 + (v & 0x3FF));
      } else out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
}

void dump(const Value& v, const DumpOptions& o, int level, std::string& out) {
  auto newline = [&](int lvl) {
    if (!o.indent) return;
    out.push_back('\n');
    for (int k = 0; k < lvl; ++k) out += *o.indent;
  };
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.i); return;
    case Kind::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(v.f);
      return;
    case Kind::String: dump_string(v.s, o.ensure_ascii, out); return;
    case Kind::List: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += o.item_sep;
        newline(level + 1);
        dump((*v.list)[k], o, level + 1, out);
      }
      newline(level);
      out.push_back(']');
      return;
    }
    case Kind::Dict: {
      if (v.dict->namespace_ || v.dict->loop) break;
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out.push_back('{');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += o.item_sep;
        newline(level + 1);
        dump_string(items[k]->first, o.ensure_ascii, out);
        out += o.key_sep;
        dump(items[k]->second, o, level + 1, out);
      }
      newline(level);
      out.push_back('}');
      return;
    }
    default: break;
  }
  std::string tn = type_name(v);
  if (v.kind == Kind::Function) tn = v.fn->type_name.substr(v.fn->type_name.rfind('.') + 1);
  throw TemplateError("Object of type " + tn + " is not JSON serializable");
}

}  // namespace

Value from_json(const nlohmann::json& j) { return convert(j); }
Value from_json(const nlohmann::ordered_json& j) { return convert(j); }

std::string dumps(const Value& v, const DumpOptions& opt) {
  std::string out;
  dump(v, opt, 0, out);
  return out;
}

}  // namespace fuselm::tmpl
