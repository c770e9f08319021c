// Activation kernels compiled for the avx512 path (bodies in activation_impl.h).
#include "kernels/cpu/activation_kernels.h"
#include "kernels/cpu/simd.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx512.inc"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/simd_math.h"
#include "kernels/cpu/activation_impl.h"
#include "kernels/cpu/isa_end.inc"

namespace fuselm::kernels {
const ActivationKernels kActivationKernelsAvx512 = make_activation_kernels<Isa::avx512>();
}  // namespace fuselm::kernels
#endif
