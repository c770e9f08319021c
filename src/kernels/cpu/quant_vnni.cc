// quant_linear kernels compiled for the vnni path (bodies in quant_simd_impl.h).
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_kernels.h"
#include "kernels/cpu/quant_packed.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx512vnni.inc"
#define FUSELM_QUANT_VNNI 1
#include "kernels/cpu/quant_simd_impl.h"
#undef FUSELM_QUANT_VNNI
#include "kernels/cpu/isa_end.inc"

namespace fuselm::kernels {
const QuantKernels kQuantKernelsVnni = {rows_simd, packed_vnni, "vnni", quantize_simd};
}  // namespace fuselm::kernels
#endif
