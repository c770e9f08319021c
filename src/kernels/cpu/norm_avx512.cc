// Row normalisation kernels compiled for the avx512 path (bodies in norm_impl.h).
#include "kernels/cpu/norm_kernels.h"
#include "kernels/cpu/simd.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx512.inc"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/norm_impl.h"
#include "kernels/cpu/isa_end.inc"

namespace fuselm::kernels {
const NormKernels kNormKernelsAvx512 = make_norm_kernels<Isa::avx512>();
}  // namespace fuselm::kernels
#endif
