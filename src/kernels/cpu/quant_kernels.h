#pragma once
// Per-path kernel table of quant_linear (internal: quant.cc dispatches, quant_generic.cc and
// quant_impl.h implement; the per-level tables are generated from quant_impl.h's isa-table line).
#include <cstdint>

#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_packed.h"

namespace fuselm::kernels {

/// QuantLinearArgs after validation, strides resolved; x already quantized (Q8Acts).
struct QuantProblem {
  QuantType type;
  const unsigned char* w;
  int64_t ldw;  // bytes
  const float* bias;
  float* y;
  int64_t ldy;
  int64_t m, n, k;
};

class QuantPacked;

/// quant_linear_packed after validation; x already quantized.
struct PackedProblem {
  const QuantPacked* w;
  const float* bias;
  float* y;
  int64_t ldy;
  int64_t m;
  /// Decode: bytes ahead of the codes being read that the avx2 tile prefetches (0: none;
  /// CpuTuning::packed_decode_prefetch).
  int64_t prefetch = 0;
};

struct QuantKernels {
  /// y[:, n0:n1) for all m rows: each weight row is decoded once per group of up to 4 rows of x.
  void (*rows)(const QuantProblem& p, const Q8Acts& a, int64_t n0, int64_t n1);
  /// y[:, 16·g0 : 16·g1) (clipped to n) for all m rows of packed weights.
  void (*packed)(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t g1);
  const char* name;
  /// Activation rows [i0, i1) of x quantized as quantize_acts' scalar loop (bit for bit: the same
  /// fp32 operations, vectorized); null: the scalar loop. Arrays as in Q8Acts, at row 0.
  void (*quantize)(const float* x, int64_t lda, int64_t i0, int64_t i1, int64_t k, int64_t block, int8_t* q, float* d,
                   int16_t* sum16, float* dsum);
};

/// The table for the current ISA (cpu_isa(): isa_kernels<QuantKernels>()).
const QuantKernels& quant_kernels();

extern const QuantKernels kQuantKernelsGeneric;

}  // namespace fuselm::kernels
