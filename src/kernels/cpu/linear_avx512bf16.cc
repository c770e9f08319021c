// linear kernels of the avx512bf16 and amx paths: bf16 weights through vdpbf16ps
// (linear_bf16dot_impl.h) and, on the amx path, AMX tiles for more than kGemvRows rows
// (linear_amx_impl.h); every other dtype through the avx512 bodies of linear_impl.h, compiled
// again in this region.
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx512bf16.inc"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/linear_impl.h"
#include "kernels/cpu/linear_bf16dot_impl.h"
#include "kernels/cpu/linear_amx_impl.h"

namespace fuselm::kernels {
namespace {

void gemm_amx(const LinearProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (p.w_dtype != DType::bf16) return gemm_entry<Isa::avx512>(p, m0, m1, n0, n1);
  amx_gemm(p, m0, m1, n0, n1);
}

}  // namespace
}  // namespace fuselm::kernels
#include "kernels/cpu/isa_end.inc"

namespace fuselm::kernels {
// f32 weights take the avx512 bodies, so their panels packed at load are avx512's.
const LinearKernels kLinearKernelsAvx512Bf16 = {&gemv_bf16dot, &gemm_bf16dot, kDotNR, kDotMR, &pack_all_bf16,
                                                &panel_pairs, &pack_all_f32<Isa::avx512>};
// GEMV (decode) keeps the avx512 widening path: on Sapphire Rapids vdpbf16ps GEMV measured no faster at
// one row (memory-bound) and slower at 4 rows than widening plus two FMAs.
const LinearKernels kLinearKernelsAmx = {&gemv_entry<Isa::avx512>, &gemm_amx, kDotNR, kDotMR, &pack_all_bf16,
                                         &panel_pairs, &pack_all_f32<Isa::avx512>};
}  // namespace fuselm::kernels
#endif
