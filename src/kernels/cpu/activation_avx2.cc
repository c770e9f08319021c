// Activation kernels compiled for the avx2 path (bodies in activation_impl.h).
#include "kernels/cpu/activation_kernels.h"
#include "kernels/cpu/simd.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx2.inc"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_math.h"
#include "kernels/cpu/activation_impl.h"
#include "kernels/cpu/isa_end.inc"

namespace fuselm::kernels {
const ActivationKernels kActivationKernelsAvx2 = make_activation_kernels<Isa::avx2>();
}  // namespace fuselm::kernels
#endif
