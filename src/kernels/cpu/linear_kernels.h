#pragma once
// Per-ISA kernel table of linear (internal: linear.cc dispatches, linear_impl.h implements; the
// per-level tables are generated from its isa-table line).
#include <cstdint>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear.h"

namespace fuselm::kernels {

/// LinearArgs after validation, strides resolved.
struct LinearProblem {
  const float* x;
  int64_t lda;
  const void* w;
  DType w_dtype;
  WeightLayout w_layout;
  int64_t ldw;
  const float* bias;
  float* y;
  int64_t ldy;
  int64_t m, n, k;
  const PackedLinearWeights* packed;  // or nullptr
  /// GEMV over an [n, k] W reads it in memory order, one row at a time (CpuTuning::gemv_memory_order).
  bool gemv_memory_order;
  /// Bytes of W ahead of the memory-order GEMV's reads prefetched into L2 (0: none;
  /// CpuTuning::gemv_prefetch).
  int64_t gemv_prefetch = 0;
  /// Rows the memory-order GEMV reads at once, each from its own part of the thread's rows (1, 2,
  /// 4 or 8; CpuTuning::gemv_streams).
  int gemv_streams = 1;
};

struct LinearKernels {
  /// All rows of y (in passes of at most kGemvRows), output columns [n0, n1). W read once per pass.
  void (*gemv)(const LinearProblem& p, int64_t n0, int64_t n1);
  /// Rows [m0, m1), output columns [n0, n1) of y, blocked GEMM with packed W panels.
  void (*gemm)(const LinearProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1);
  int64_t gemm_nr;  // GEMM panel width (columns)
  int64_t gemm_mr;  // GEMM micro-tile rows
  /// Packs all of a bf16 W into `out` (PackedLinearWeights' layout: panels of gemm_nr columns,
  /// `pairs` words each); nullptr where the path has no packed layout.
  void (*pack_bf16)(const LinearProblem& p, uint32_t* out) = nullptr;
  /// k pairs per panel row block for pack_bf16 (rounded as the path wants).
  int64_t (*packed_pairs)(int64_t k) = nullptr;
  /// Packs all of an f32 W into `out` (PackedLinearWeights' f32 layout: panels of gemm_nr columns,
  /// [k][gemm_nr] floats each).
  void (*pack_f32)(const LinearProblem& p, float* out) = nullptr;
};

inline constexpr int64_t kGemvRows = 8;

extern const LinearKernels kLinearKernelsGeneric;

}  // namespace fuselm::kernels
