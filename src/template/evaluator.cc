#include "template/evaluator.h"

#include <algorithm>

#include "template/builtins.h"
#include "template/chat_template.h"
#include "template/pystr.h"

namespace fuselm::tmpl {

namespace {

[[noreturn]] void fail_at(int line, const std::string& what) {
  throw TemplateError("line " + std::to_string(line) + ": " + what);
}

/// Whether a macro body reads `name` (jinja2 accepts extra arguments only then: varargs,
/// kwargs, caller).
bool refers_to(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->kind == ExprKind::Name && e->name == name) return true;
  for (const auto& a : e->args)
    if (refers_to(a.get(), name)) return true;
  for (const auto& kv : e->kwargs)
    if (refers_to(kv.second.get(), name)) return true;
  return false;
}
bool refers_to(const Body& body, const std::string& name);
bool refers_to(const Stmt& s, const std::string& name) {
  if (refers_to(s.expr.get(), name) || refers_to(s.cond.get(), name)) return true;
  for (const auto& c : s.conds)
    if (refers_to(c.get(), name)) return true;
  for (const auto& p : s.params)
    if (refers_to(p.second.get(), name)) return true;
  for (const auto& b : s.bodies)
    if (refers_to(b, name)) return true;
  if (s.kind == StmtKind::Macro) return false;  // a nested macro has its own varargs/kwargs
  return refers_to(s.body, name) || refers_to(s.else_body, name);
}
bool refers_to(const Body& body, const std::string& name) {
  for (const auto& s : body)
    if (refers_to(*s, name)) return true;
  return false;
}

/// Swaps the output buffer for the life of the object.
struct Redirect {
  std::string*& slot;
  std::string* saved;
  Redirect(std::string*& s, std::string* to) : slot(s), saved(s) { slot = to; }
  ~Redirect() { slot = saved; }
};
struct ScopeGuard {
  std::shared_ptr<Scope>& slot;
  std::shared_ptr<Scope> saved;
  ScopeGuard(std::shared_ptr<Scope>& s, std::shared_ptr<Scope> to) : slot(s), saved(s) { slot = std::move(to); }
  ~ScopeGuard() { slot = saved; }
};

std::shared_ptr<Scope> child(const std::shared_ptr<Scope>& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

}  // namespace

std::string Context::render(const Template& t, std::shared_ptr<Scope> globals) {
  std::string out;
  Redirect r(out_, &out);
  ScopeGuard g(scope_, enter(globals, t.frame));
  exec(t.body);
  return out;
}

std::shared_ptr<Scope> Context::enter(const std::shared_ptr<Scope>& parent, const FramePtr& frame) {
  auto s = child(parent);
  s->frame = frame;
  if (frame) {
    ScopeGuard g(scope_, parent);
    for (const auto& name : frame->inherit) s->vars[name] = lookup(name);
  }
  return s;
}

void Context::check_size(size_t bytes) const {
  if (bytes > limits_.max_output)
    throw TemplateError("template output exceeds " + std::to_string(limits_.max_output) + " bytes");
}

void Context::emit(const std::string& s) {
  out_->append(s);
  check_size(out_->size());
}

std::string Context::capture(const Body& body, std::shared_ptr<Scope> scope) {
  std::string buf;
  Redirect r(out_, &buf);
  ScopeGuard g(scope_, std::move(scope));
  exec(body);
  return buf;
}

Context::Flow Context::exec(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Context::Flow Context::exec(const Stmt& s) {
  switch (s.kind) {
    case StmtKind::Text: emit(s.text); return Flow::Normal;
    case StmtKind::Print: emit(to_str(eval(*s.expr))); return Flow::Normal;
    case StmtKind::If: return exec_if(s);
    case StmtKind::For: return exec_for(s);
    case StmtKind::Set: case StmtKind::SetBlock: exec_set(s); return Flow::Normal;
    case StmtKind::Macro: exec_macro(s); return Flow::Normal;
    case StmtKind::CallBlock: exec_call_block(s); return Flow::Normal;
    case StmtKind::FilterBlock: {
      Value v = Value::string(capture(s.body, enter(scope_, s.frame)));
      // the chain's innermost filter has a null base: it takes the rendered body
      std::vector<const Expr*> chain;
      for (const Expr* e = s.expr.get(); e; e = e->args[0].get()) chain.push_back(e);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        Args a = eval_args(**it, 1);
        v = filter((*it)->name, v, a);
      }
      emit(to_str(v));
      return Flow::Normal;
    }
    case StmtKind::Generation: {  // a call block in transformers' extension: its own frame
      ScopeGuard g(scope_, enter(scope_, s.frame));
      return exec(s.body);
    }
    case StmtKind::With: {
      auto sc = enter(scope_, s.frame);
      for (const auto& [n, e] : s.params) sc->vars[n] = eval(*e);
      ScopeGuard g(scope_, sc);
      return exec(s.body);
    }
    case StmtKind::Break: return Flow::Break;
    case StmtKind::Continue: return Flow::Continue;
  }
  return Flow::Normal;
}

Context::Flow Context::exec_if(const Stmt& s) {
  for (size_t k = 0; k < s.conds.size(); ++k)
    if (truthy(eval(*s.conds[k]))) return exec(s.bodies[k]);
  return exec(s.else_body);
}

void Context::assign(const std::vector<std::string>& targets, const Value& v, int line) {
  if (targets.size() == 1) {
    scope_->vars[targets[0]] = v;
    return;
  }
  List items = iterate(v);
  if (items.size() != targets.size())
    fail_at(line, items.size() > targets.size()
                      ? "too many values to unpack (expected " + std::to_string(targets.size()) + ")"
                      : "not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " +
                            std::to_string(items.size()) + ")");
  for (size_t k = 0; k < targets.size(); ++k) scope_->vars[targets[k]] = items[k];
}

Context::Flow Context::exec_for(const Stmt& s) {
  List all = iterate(eval(*s.expr));
  List items;
  if (s.cond) {  // the loop filter sees each item bound to the target
    for (const auto& it : all) {
      ScopeGuard g(scope_, enter(scope_, s.frame));
      assign(s.targets, it, s.line);
      if (truthy(eval(*s.cond))) items.push_back(it);
    }
  } else {
    items = std::move(all);
  }
  if (items.empty()) {
    ScopeGuard g(scope_, enter(scope_, s.else_frame));
    exec(s.else_body);
    return Flow::Normal;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  // One loop object for the whole loop, advanced in place, as jinja2's LoopContext is.
  Value loop = Value::make_dict();
  loop.dict->loop = true;
  auto& d = *loop.dict;
  for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0",
                          "previtem", "nextitem", "cycle"})
    d.items.emplace_back(key, Value());
  d.items[6].second = Value::integer(n);
  d.items[7].second = Value::integer(1);
  d.items[8].second = Value::integer(0);
  std::weak_ptr<Dict> weak = loop.dict;
  d.items[11].second = Value::function("cycle", [weak](Context&, Args& a) -> Value {
    auto live = weak.lock();
    if (a.pos.empty()) throw TemplateError("no items for cycling given");
    int64_t k = live ? live->items[1].second.i : 0;
    return a.pos[static_cast<size_t>(k) % a.pos.size()];
  }, "method");
  bool completed = false;  // jinja2 runs the else block unless some iteration reached the body's end
  for (int64_t k = 0; k < n; ++k) {
    if (++iterations_ > limits_.max_iterations)
      fail_at(s.line, "loop iterations exceed the sandbox bound of " + std::to_string(limits_.max_iterations));
    d.items[0].second = Value::integer(k + 1);
    d.items[1].second = Value::integer(k);
    d.items[2].second = Value::integer(n - k);
    d.items[3].second = Value::integer(n - k - 1);
    d.items[4].second = Value::boolean(k == 0);
    d.items[5].second = Value::boolean(k == n - 1);
    d.items[9].second = k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item");
    d.items[10].second = k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item");
    ScopeGuard g(scope_, enter(scope_, s.frame));
    scope_->vars["loop"] = loop;
    assign(s.targets, items[k], s.line);
    Flow f = exec(s.body);
    if (f == Flow::Break) break;
    if (f == Flow::Normal) completed = true;
  }
  if (!completed) {
    ScopeGuard g(scope_, enter(scope_, s.else_frame));
    exec(s.else_body);
  }
  return Flow::Normal;
}

void Context::exec_set(const Stmt& s) {
  Value v;
  if (s.kind == StmtKind::SetBlock) {
    v = Value::string(capture(s.body, enter(scope_, s.frame)));
    if (s.expr) {
      std::vector<const Expr*> chain;
      for (const Expr* e = s.expr.get(); e; e = e->args[0].get()) chain.push_back(e);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        Args a = eval_args(**it, 1);
        v = filter((*it)->name, v, a);
      }
    }
  } else {
    v = eval(*s.expr);
  }
  if (!s.name.empty()) {  // set ns.attr = v
    Value target = lookup(s.targets[0]);
    if (!target.is_dict() || !target.dict->namespace_) fail_at(s.line, "Cannot assign attribute on non-namespace object");
    target.dict->set(s.name, v);
    return;
  }
  assign(s.targets, v, s.line);
}

Value Context::macro_value(const Stmt& s, std::shared_ptr<Scope> defined_in) {
  const bool uses_varargs = refers_to(s.body, "varargs"), uses_kwargs = refers_to(s.body, "kwargs");
  const bool uses_caller = refers_to(s.body, "caller");
  const Stmt* def = &s;
  if (macro_scopes_.empty() || macro_scopes_.back() != defined_in) macro_scopes_.push_back(defined_in);
  std::weak_ptr<Scope> weak_scope = defined_in;
  return Value::function(s.name, [def, weak_scope, uses_varargs, uses_kwargs, uses_caller](Context& ctx, Args& a) {
    const auto defined_in = weak_scope.lock();
    if (!defined_in) throw TemplateError("macro '" + def->name + "' called after its template finished rendering");
    auto sc = ctx.enter(defined_in, def->frame);
    const auto& params = def->params;
    if (a.pos.size() > params.size() && !uses_varargs)
      throw TemplateError("macro '" + def->name + "' takes not more than " + std::to_string(params.size()) +
                          " argument(s)");
    List varargs(a.pos.size() > params.size() ? a.pos.begin() + static_cast<long>(params.size()) : a.pos.end(),
                 a.pos.end());
    Value kwargs = Value::make_dict();
    std::vector<bool> given(params.size(), false);
    for (size_t k = 0; k < params.size() && k < a.pos.size(); ++k) {
      sc->vars[params[k].first] = a.pos[k];
      given[k] = true;
    }
    for (auto& kw : a.kw) {
      // Not a structured binding: clang before 16 cannot capture one in a lambda.
      const auto& name = kw.first;
      auto& v = kw.second;
      auto it = std::find_if(params.begin(), params.end(), [&](const auto& p) { return p.first == name; });
      if (it != params.end()) {
        sc->vars[name] = v;
        given[static_cast<size_t>(it - params.begin())] = true;
      } else if (name == "caller" && uses_caller) {
        sc->vars["caller"] = v;
      } else if (uses_kwargs) {
        kwargs.dict->set(name, v);
      } else {
        throw TemplateError("macro '" + def->name + "' takes no keyword argument '" + name + "'");
      }
    }
    ScopeGuard g(ctx.scope_, sc);
    for (size_t k = 0; k < params.size(); ++k) {
      if (given[k]) continue;
      sc->vars[params[k].first] = params[k].second ? ctx.eval(*params[k].second)
                                                   : Value::undefined("parameter '" + params[k].first + "' was not provided");
    }
    if (uses_varargs) sc->vars["varargs"] = Value::make_list(std::move(varargs), true);
    if (uses_kwargs) sc->vars["kwargs"] = kwargs;
    if (!sc->vars.count("caller") && uses_caller) sc->vars["caller"] = Value::undefined("'caller' is undefined");
    if (++ctx.call_depth_ > ctx.limits_.max_call_depth) {
      --ctx.call_depth_;
      throw TemplateError("macro '" + def->name + "': calls nested deeper than " +
                          std::to_string(ctx.limits_.max_call_depth) + " (unbounded recursion?)");
    }
    std::string out;
    try {
      out = ctx.capture(def->body, sc);
    } catch (...) {
      --ctx.call_depth_;
      throw;
    }
    --ctx.call_depth_;
    return Value::string(std::move(out));
  }, "jinja2.runtime.Macro");
}

void Context::exec_macro(const Stmt& s) { scope_->vars[s.name] = macro_value(s, scope_); }

void Context::exec_call_block(const Stmt& s) {
  // {% call(params) m(args) %}body{% endcall %}: m gets caller=<macro rendering body>
  Value caller = Value::function("caller", [&s, defined_in = scope_](Context& ctx, Args& a) {
    auto sc = ctx.enter(defined_in, s.frame);
    for (size_t k = 0; k < s.params.size(); ++k) {
      if (k < a.pos.size()) sc->vars[s.params[k].first] = a.pos[k];
      else sc->vars[s.params[k].first] = s.params[k].second ? ctx.eval(*s.params[k].second) : Value::undefined("parameter '" + s.params[k].first + "' was not provided");
    }
    if (++ctx.call_depth_ > ctx.limits_.max_call_depth) {
      --ctx.call_depth_;
      throw TemplateError("caller: calls nested deeper than " + std::to_string(ctx.limits_.max_call_depth));
    }
    std::string out;
    try {
      out = ctx.capture(s.body, sc);
    } catch (...) {
      --ctx.call_depth_;
      throw;
    }
    --ctx.call_depth_;
    return Value::string(std::move(out));
  }, "jinja2.runtime.Macro");
  const Expr& call = *s.expr;
  Value fn = eval(*call.args[0]);
  Args a = eval_args(call, 1);
  a.kw.emplace_back("caller", caller);
  emit(to_str(this->call(fn, a)));
}

Value Context::lookup(const std::string& name) {
  for (Scope* sc = scope_.get(); sc; sc = sc->parent.get()) {
    auto it = sc->vars.find(name);
    if (it != sc->vars.end()) return it->second;
    if (sc->frame && sc->frame->stores.count(name)) return Value::undefined("'" + name + "' is undefined");
  }
  Value g = find_global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined("'" + name + "' is undefined");
}

Args Context::eval_args(const Expr& e, size_t first) {
  Args a;
  for (size_t k = first; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k]));
  for (const auto& [n, x] : e.kwargs) a.kw.emplace_back(n, eval(*x));
  return a;
}

Value Context::call(const Value& fn, Args& args) {
  if (fn.is_undefined()) fail_undefined(fn);
  if (fn.kind != Kind::Function) throw TemplateError("'" + type_name(fn) + "' object is not callable");
  return fn.fn->call(*this, args);
}

Value Context::filter(const std::string& name, const Value& v, Args& args) {
  FilterFn f = find_filter(name);
  if (!f && unsupported_filter(name)) throw TemplateError("unsupported filter '" + name + "'");
  if (!f) throw TemplateError("No filter named '" + name + "' found.");
  return f(*this, v, args);
}

bool Context::test(const std::string& name, const Value& v, Args& args) {
  TestFn t = find_test(name);
  if (!t) throw TemplateError("No test named '" + name + "' found.");
  return t(*this, v, args);
}

}  // namespace fuselm::tmpl
