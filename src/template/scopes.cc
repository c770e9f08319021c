#include "template/scopes.h"

#include <unordered_map>
#include <unordered_set>

namespace fuselm::tmpl {
namespace {

using NameSet = std::unordered_set<std::string>;

/// One frame: the first use of each name in it (source order), and the nested frames to analyse
/// once this frame is complete (jinja2 analyses a nested frame against its parents' full symbols).
class FrameWalker {
 public:
  FrameWalker(const std::vector<std::string>& preset, const NameSet& outer_refs) : outer_(outer_refs) {
    for (const auto& n : preset) store(n);
  }

  void body(Body& b) {
    for (auto& s : b) stmt(*s);
  }
  void expr(const Expr* e) {
    if (!e) return;
    if (e->kind == ExprKind::Name) load(e->name);
    for (const auto& a : e->args) expr(a.get());
    for (const auto& kv : e->kwargs) expr(kv.second.get());
  }

  FramePtr finish() {
    auto f = std::make_shared<Frame>();
    NameSet refs = outer_;
    for (const auto& [name, use] : first_) {
      refs.insert(name);
      if (use == Use::Load) continue;
      f->stores.insert(name);
      // jinja2 Symbols.store/load/branch_update: the outer value is kept when the name was
      // loaded first, stored only in a branch, or has a reference in an enclosing frame.
      if (use != Use::Store || outer_.count(name)) f->inherit.push_back(name);
    }
    for (auto& n : nested_) {
      FrameWalker inner(n.preset, refs);
      for (const Expr* e : n.exprs) inner.expr(e);
      inner.body(*n.body);
      *n.slot = inner.finish();
    }
    return f;
  }

 private:
  enum class Use { Load, Store, LoadThenStore, BranchStore };
  struct Nested {
    Body* body;
    std::vector<std::string> preset;
    std::vector<const Expr*> exprs;  // evaluated inside the nested frame (loop filter, macro defaults)
    FramePtr* slot;
  };

  void load(const std::string& n) { first_.try_emplace(n, Use::Load); }
  void store(const std::string& n) {
    auto it = first_.find(n);
    if (it == first_.end()) first_.emplace(n, branch_depth_ > 0 ? Use::BranchStore : Use::Store);
    else if (it->second == Use::Load) it->second = Use::LoadThenStore;
  }
  void nest(Body& b, std::vector<std::string> preset, FramePtr& slot, std::vector<const Expr*> exprs = {}) {
    nested_.push_back({&b, std::move(preset), std::move(exprs), &slot});
  }

  void stmt(Stmt& s) {
    switch (s.kind) {
      case StmtKind::Text: case StmtKind::Break: case StmtKind::Continue: break;
      case StmtKind::Print: expr(s.expr.get()); break;
      case StmtKind::If:
        for (auto& c : s.conds) expr(c.get());
        ++branch_depth_;
        for (auto& b : s.bodies) body(b);
        body(s.else_body);
        --branch_depth_;
        break;
      case StmtKind::For: {
        expr(s.expr.get());
        std::vector<std::string> preset = s.targets;
        preset.push_back("loop");
        nest(s.body, preset, s.frame, {s.cond.get()});
        nest(s.else_body, {}, s.else_frame);
        break;
      }
      case StmtKind::Set:
        expr(s.expr.get());
        if (!s.name.empty()) load(s.targets[0]);  // set ns.attr loads ns
        else
          for (const auto& t : s.targets) store(t);
        break;
      case StmtKind::SetBlock:
        nest(s.body, {}, s.frame);
        expr(s.expr.get());
        store(s.targets[0]);
        break;
      case StmtKind::Macro: {
        store(s.name);
        std::vector<std::string> preset = {"varargs", "kwargs", "caller"};
        std::vector<const Expr*> defaults;
        for (const auto& p : s.params) {
          preset.push_back(p.first);
          defaults.push_back(p.second.get());
        }
        nest(s.body, preset, s.frame, defaults);
        break;
      }
      case StmtKind::CallBlock: {
        expr(s.expr.get());
        std::vector<std::string> preset;
        for (const auto& p : s.params) preset.push_back(p.first);
        nest(s.body, preset, s.frame);
        break;
      }
      case StmtKind::FilterBlock:
        expr(s.expr.get());
        nest(s.body, {}, s.frame);
        break;
      case StmtKind::Generation: nest(s.body, {}, s.frame); break;
      case StmtKind::With: {
        std::vector<std::string> preset;
        for (const auto& p : s.params) {
          expr(p.second.get());
          preset.push_back(p.first);
        }
        nest(s.body, preset, s.frame);
        break;
      }
    }
  }

  NameSet outer_;
  std::unordered_map<std::string, Use> first_;
  std::vector<Nested> nested_;
  int branch_depth_ = 0;
};

}  // namespace

FramePtr analyze_frames(Body& body, const std::vector<std::string>& preset) {
  FrameWalker w(preset, {});
  w.body(body);
  return w.finish();
}

}  // namespace fuselm::tmpl
