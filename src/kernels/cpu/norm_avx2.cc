// Row normalisation kernels compiled for the avx2 path (bodies in norm_impl.h).
#include "kernels/cpu/norm_kernels.h"
#include "kernels/cpu/simd.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx2.inc"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/norm_impl.h"
#include "kernels/cpu/isa_end.inc"

namespace fuselm::kernels {
const NormKernels kNormKernelsAvx2 = make_norm_kernels<Isa::avx2>();
}  // namespace fuselm::kernels
#endif
