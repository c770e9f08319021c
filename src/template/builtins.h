#pragma once
// Registries of the built-in filters, tests, methods and globals (filters.cc, tests.cc,
// methods.cc, globals.cc).
#include <string>

#include "template/value.h"

namespace fuselm::tmpl {

using FilterFn = Value (*)(Context& ctx, const Value& v, Args& args);
using TestFn = bool (*)(Context& ctx, const Value& v, Args& args);

/// The filter named `name`, or nullptr (jinja2's filters plus transformers' tojson).
FilterFn find_filter(const std::string& name);
/// The test named `name`, or nullptr.
TestFn find_test(const std::string& name);
/// `obj.name` as jinja2's sandboxed getattr: the str/dict/list method bound to obj, or
/// Undefined (an unsafe one for methods the immutable sandbox forbids, such as list.append), or
/// nullopt when `obj` has no such method.
bool find_method(const Value& obj, const std::string& name, Value& out);
/// The globals transformers' environment defines: range, namespace, dict, cycler, joiner,
/// raise_exception, strftime_now.
Value find_global(const std::string& name);

/// Argument helpers for built-ins: positional k or keyword `name`, else `fallback`.
const Value* arg(const Args& a, size_t k, const char* name);
Value arg_or(const Args& a, size_t k, const char* name, Value fallback);

}  // namespace fuselm::tmpl
