// The fuser registry. Each fuser registers itself from its own file with its order
// (register_fuser, fuser.h), so adding a fuser is one new file: no central list to edit. The
// library is linked whole-archive (CMakeLists.txt) so that no fuser's object, which nothing
// else references, is dropped with its registration. The first rewriting fuser that matches a
// module wins; additive fusers (attention) and composing ones (rope) apply alongside.
#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "fusers/fuser.h"

namespace fuselm::fusers {
namespace {

struct Entry {
  const Fuser* fuser;
  int order;
};

// Filled during static initialisation (a function-local static: constructed on the first
// registration, whichever file's initialiser runs first).
std::vector<Entry>& entries() {
  static std::vector<Entry> e;
  return e;
}

// The registered fusers by order; two fusers with one order, or one name, are a logic_error (the
// order between them would depend on link order).
std::vector<const Fuser*> ordered() {
  std::vector<Entry> e = entries();
  std::sort(e.begin(), e.end(), [](const Entry& a, const Entry& b) { return a.order < b.order; });
  std::vector<const Fuser*> out;
  for (size_t i = 0; i < e.size(); ++i) {
    if (i > 0 && e[i].order == e[i - 1].order)
      throw std::logic_error(fmt::format("fusers {} and {} both register order {}", e[i - 1].fuser->name(),
                                         e[i].fuser->name(), e[i].order));
    for (const Fuser* f : out)
      if (f->name() == e[i].fuser->name())
        throw std::logic_error(fmt::format("two fusers register the name {}", f->name()));
    out.push_back(e[i].fuser);
  }
  return out;
}

}  // namespace

bool register_fuser(const Fuser& f, int order) {
  entries().push_back({&f, order});
  return true;
}

std::span<const Fuser* const> registry() {
  static const std::vector<const Fuser*> kFusers = ordered();
  return kFusers;
}

}  // namespace fuselm::fusers
