#pragma once
// The one ISA dispatcher (internal to src/kernels/cpu): a kernel family keeps one table of
// function pointers per path (`<family>_kernels.h`: generic, avx2, avx512, each built from the
// same template in `<family>_impl.h`) and picks the table of the path in use with
// isa_kernels<kGeneric, kAvx2, kAvx512>(cpu_isa()). The x86 tables are named only where the
// build has them (FUSELM_X86_ISAS), so a non-x86 build links with the generic table alone.
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd.h"

namespace fuselm::kernels {

template <const auto& Generic, const auto& Avx2, const auto& Avx512>
const auto& isa_kernels(Isa isa) {
#if FUSELM_X86_ISAS
  if (isa >= Isa::avx512) return Avx512;  // avx512bf16 runs the avx512 tables (ordered paths)
  if (isa == Isa::avx2) return Avx2;
#endif
  (void)isa;
  return Generic;
}

}  // namespace fuselm::kernels
