#pragma once
// The one ISA dispatcher (internal to the kernels and the machine probes). A kernel family keeps
// one table of function pointers per path, all built from one source (`<family>_impl.h`, whose
// `// isa-table: <Table> <make_function> <levels...>` line makes CMake compile it once per listed
// level, see CMakeLists.txt and isa_table.cc.in), and picks the table of the path in use with
// isa_kernels<Table>().
//
// IsaTables<Table>::by_level[i] is the table for level i: the one compiled for the family's highest
// listed level at or below i (the levels are nested, isa.h), the generic table below every listed
// level, and the generic table at every level on a build without x86 paths. CMake writes the array
// into build/isa/<family>_tables.inc, which <family>.cc includes after declaring k<Table>Generic.
#include <cstddef>

#include "kernels/cpu/isa.h"

namespace fuselm::kernels {

template <class Table>
struct IsaTables {
  static const Table* const by_level[kIsaCount];
};

/// The family's table for `isa` (default: the path in use).
template <class Table>
const Table& isa_kernels(Isa isa = cpu_isa()) {
  return *IsaTables<Table>::by_level[static_cast<size_t>(isa)];
}

}  // namespace fuselm::kernels
