// Attention kernel compiled for the avx512 path (body in attention_impl.h).
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/simd.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx512.inc"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/simd_math.h"
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/isa_end.inc"

namespace fuselm::kernels {
const AttentionKernels kAttentionKernelsAvx512 = make_attention_kernels<Isa::avx512>();
}  // namespace fuselm::kernels
#endif
