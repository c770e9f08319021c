// linear kernels compiled for the avx512 path (bodies in linear_impl.h).
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx512.inc"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/linear_impl.h"
#include "kernels/cpu/isa_end.inc"

namespace fuselm::kernels {
const LinearKernels kLinearKernelsAvx512 = make_linear_kernels<Isa::avx512>();
}  // namespace fuselm::kernels
#endif
