#pragma once
// The evaluator: runs a parsed template in a sandbox (no IO; bounded call depth, loop
// iterations and output size) with jinja2's semantics for scopes, loops, macros and Undefined.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "template/ast.h"
#include "template/value.h"

namespace fuselm::tmpl {

/// Sandbox bounds. Exceeding one is a TemplateError naming the bound.
struct Limits {
  int max_call_depth = 256;                // nested macro/caller calls
  int64_t max_iterations = 2'000'000;      // loop iterations over the whole render
  size_t max_output = 16u << 20;           // bytes of any rendered string (UTF-8)
};

/// Variables of one running frame; lookups walk up to the render's globals. A name the frame
/// stores but has not assigned yet is undefined there (jinja2's frame locals).
struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  FramePtr frame;  // null for the globals
};

class Context {
 public:
  explicit Context(Limits limits = {}) : limits_(limits) {}

  /// Renders `t` with `globals` as the outermost variables.
  std::string render(const Template& t, std::shared_ptr<Scope> globals);

  Value eval(const Expr& e);
  /// Calls a callable value; raises for Undefined and non-callables.
  Value call(const Value& fn, Args& args);
  /// Applies filter/test `name` (used by map/select/selectattr and by filter expressions).
  Value filter(const std::string& name, const Value& v, Args& args);
  bool test(const std::string& name, const Value& v, Args& args);

  const Limits& limits() const { return limits_; }
  /// Throws when a string of `bytes` would exceed the output bound.
  void check_size(size_t bytes) const;

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_if(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void exec_set(const Stmt& s);
  void exec_macro(const Stmt& s);
  void exec_call_block(const Stmt& s);
  std::string capture(const Body& body, std::shared_ptr<Scope> scope);
  void emit(const std::string& s);
  void assign(const std::vector<std::string>& targets, const Value& v, int line);
  Value macro_value(const Stmt& s, std::shared_ptr<Scope> defined_in);
  Value lookup(const std::string& name);
  /// A new scope for `frame` under `parent`, its inherited names set from `parent`.
  std::shared_ptr<Scope> enter(const std::shared_ptr<Scope>& parent, const FramePtr& frame);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value binary(const Expr& e);
  bool compare(const std::string& op, const Value& a, const Value& b);
  Args eval_args(const Expr& e, size_t first);

  Limits limits_;
  std::shared_ptr<Scope> scope_;
  // The scopes macros were defined in, alive until the render ends. A macro holds its scope weakly:
  // the scope holds the macro, so a strong pointer back would be a cycle that never frees.
  std::vector<std::shared_ptr<Scope>> macro_scopes_;
  std::string* out_ = nullptr;
  int call_depth_ = 0;
  int64_t iterations_ = 0;
};

/// Python's `a in b` as jinja2 evaluates it.
bool contains(const Value& container, const Value& item);
/// Python arithmetic (+ - * / // % **) with Python's result types; `op` is the operator.
Value arithmetic(const std::string& op, const Value& a, const Value& b, const Context& ctx);

}  // namespace fuselm::tmpl
