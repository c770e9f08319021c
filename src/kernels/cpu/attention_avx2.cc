// Attention kernel compiled for the avx2 path (body in attention_impl.h).
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/simd.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx2.inc"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_math.h"
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/isa_end.inc"

namespace fuselm::kernels {
const AttentionKernels kAttentionKernelsAvx2 = make_attention_kernels<Isa::avx2>();
}  // namespace fuselm::kernels
#endif
