// quant_linear kernels compiled for the avx2 path (bodies in quant_simd_impl.h).
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_kernels.h"
#include "kernels/cpu/quant_packed.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx2.inc"
#define FUSELM_QUANT_VNNI 0
#include "kernels/cpu/quant_simd_impl.h"
#undef FUSELM_QUANT_VNNI
#include "kernels/cpu/isa_end.inc"

namespace fuselm::kernels {
const QuantKernels kQuantKernelsAvx2 = {rows_simd, packed_simd, "avx2", nullptr};
}  // namespace fuselm::kernels
#endif
