// linear kernels compiled for the avx2 path (bodies in linear_impl.h).
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx2.inc"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/linear_impl.h"
#include "kernels/cpu/isa_end.inc"

namespace fuselm::kernels {
const LinearKernels kLinearKernelsAvx2 = make_linear_kernels<Isa::avx2>();
}  // namespace fuselm::kernels
#endif
