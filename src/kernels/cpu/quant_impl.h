// quant_linear's per-ISA table (internal). The generic table is quant_generic.cc's; CMake writes
// the other levels' tables from the line below, each compiling the bodies its features allow:
//   avx2        quant_simd_impl.h on vpmaddubsw + vpmaddwd (the avx512 level runs it too), packed
//               prefill on quant_avx2_gemm_impl.h's whole-group tile, quantize_acts on AVX2
//   avx512vnni  quant_simd_impl.h on vpdpbusd (levels with AVX512_VNNI), the packed kernel with a
//               GEMM for prefill, quantize_acts on AVX-512 (the avx512bf16 level runs it too)
//   amx         as avx512vnni, and packed prefill on AMX-INT8 tiles (quant_amx_impl.h)
// isa-table: QuantKernels make_quant_kernels avx2 avx512vnni amx
#include "kernels/cpu/quant_simd_impl.h"
#if FUSELM_ISA_HAS_AMX_INT8
#include "kernels/cpu/quant_amx_impl.h"
#endif
#if !FUSELM_ISA_HAS_AVX512VNNI
#include "kernels/cpu/quant_avx2_gemm_impl.h"
#endif

namespace fuselm::kernels {
namespace {  // NOLINT

template <Isa I>
constexpr QuantKernels make_quant_kernels() {
#if FUSELM_ISA_HAS_AMX_INT8
  static_assert(isa_has(I, "amx-int8") && isa_has(I, "avx512vnni"));
  return {rows_simd, packed_amx, "amx", quantize_simd};
#elif FUSELM_ISA_HAS_AVX512VNNI
  static_assert(isa_has(I, "avx512vnni") && !isa_has(I, "amx-int8"));
  return {rows_simd, packed_vnni, "vnni", quantize_simd};
#else
  static_assert(!isa_has(I, "avx512vnni"));
  return {rows_simd, packed_avx2, "avx2", quantize_simd};
#endif
}

}  // namespace
}  // namespace fuselm::kernels
