#pragma once
// linear: y = x · Wᵀ + bias (nn.Linear), or y = x · W + bias (Conv1D / addmm layout).
//
//   x     fp32 [m, k], row stride lda (>= k)                 activations, any view with unit column stride
//   w     [n, k] row stride ldw (>= k)   for WeightLayout::nk  (nn.Linear.weight)
//         [k, n] row stride ldw (>= n)   for WeightLayout::kn  (GPT-2 Conv1D.weight, addmm's mat2)
//         dtype f32, bf16 or f16 (raw bits, see dtype.h)
//   bias  fp32 [n] or nullptr
//   y     fp32 [m, n], row stride ldy (>= n)
//   y[i, j] = bias[j] + sum_p x[i, p] · W(j, p),  W(j, p) = w[j*ldw + p] (nk) or w[p*ldw + j] (kn)
//
// Accumulation is fp32 (weights are widened exactly). A stride of 0 means dense (lda = k,
// ldy = n, ldw = k for nk or n for kn). y must not overlap x, w or bias. k = 0 gives y = bias (or 0).
//
// Decode-sized m (<= 8 rows per pass) streams W once for all rows (memory-bound GEMV); larger m
// runs a blocked GEMM that packs fp32 panels of W per call into per-thread scratch, or reads the
// panels packed once at load (LinearArgs::packed). Threads
// (the kernels' pool, threading.h: at most omp_get_max_threads(), one inside a parallel task) split the
// output columns, or the rows when n is too narrow.
#include <cstdint>
#include <memory>

#include "kernels/cpu/dtype.h"

namespace fuselm::kernels {

enum class WeightLayout : unsigned char {
  nk,  // w[n, k]: PyTorch nn.Linear
  kn,  // w[k, n]: GPT-2 Conv1D, torch.addmm / matmul with a [k, n] right operand
};

class PackedLinearWeights;

struct LinearArgs {
  const float* x = nullptr;
  int64_t lda = 0;
  const void* w = nullptr;
  DType w_dtype = DType::f32;
  WeightLayout w_layout = WeightLayout::nk;
  int64_t ldw = 0;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
  int64_t m = 0, n = 0, k = 0;
  /// Optional: the same W packed once by PackedLinearWeights::pack (same n, k, layout, dtype); the
  /// GEMM of the path it was packed for reads it instead of packing W per call (f32: every path;
  /// bf16: avx512bf16/amx). Ignored by a path with another panel layout, and by the GEMV.
  const PackedLinearWeights* packed = nullptr;
};

/// Weights packed once (at load) into the layout the current ISA path's kernels read, so that
/// no call packs W again:
///  - bf16 on the avx512bf16 and amx paths: the k-pair panels of the bf16 GEMM, panels of 64
///    columns, each [ceil(k/2) rounded up to 16][64] 32-bit words holding W(j, 2q) in the low and
///    W(j, 2q+1) in the high half, zero-padded. Decode (GEMV) keeps reading the checkpoint layout.
///  - f32 on every path: the fp32 panels of the GEMM, panels of nr() columns (64 on avx512, 16 on
///    avx2, 4 on generic), each [k][nr] floats, columns past n zero. Only the GEMM reads them:
///    the GEMV (decode) keeps the checkpoint layout, whose several row streams reach more of the
///    DRAM bandwidth than one panel stream (measured: a GEMV over these panels decoded SmolLM2
///    F32 at 0.85-0.93x, with prefetching). So an f32 model holds its weights twice.
/// About the bytes of W (n rounded up to a panel). Move-only.
class PackedLinearWeights {
 public:
  /// Packs W (either layout, as in LinearArgs) when the current ISA path has a packed layout for
  /// w_dtype (see above); returns nullptr otherwise (f16, or bf16 off the avx512bf16/amx paths).
  /// Throws std::invalid_argument on inconsistent sizes.
  static std::unique_ptr<PackedLinearWeights> pack(const void* w, DType w_dtype, WeightLayout layout,
                                                   int64_t ldw, int64_t n, int64_t k);
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  WeightLayout layout() const { return layout_; }
  /// The dtype of the W it was packed from (f32 or bf16).
  DType dtype() const { return dtype_; }
  /// Columns per panel.
  int64_t nr() const { return nr_; }
  /// Whether this is W for a problem of n outputs, k inputs and `layout` (dense rows).
  bool fits(int64_t n, int64_t k, WeightLayout layout) const {
    return n == n_ && k == k_ && layout == layout_;
  }
  /// The first word of panel `p` (columns nr()·p .. nr()·p + nr() - 1).
  const uint32_t* panel(int64_t p) const { return data_.get() + p * panel_words_; }
  /// panel(p) as floats (f32 packs).
  const float* panel_f32(int64_t p) const { return reinterpret_cast<const float*>(panel(p)); }
  int64_t bytes() const { return (n_ + nr_ - 1) / nr_ * panel_words_ * 4; }

 private:
  struct Free {
    size_t bytes;  // as allocated (base/large_alloc.h); value-initialized to 0 with the pointer
    void operator()(uint32_t* p) const;
  };
  int64_t n_ = 0, k_ = 0, nr_ = 64, panel_words_ = 0;
  WeightLayout layout_ = WeightLayout::nk;
  DType dtype_ = DType::bf16;
  std::unique_ptr<uint32_t, Free> data_;
};

/// Throws std::invalid_argument on inconsistent arguments (null pointers, strides below widths).
void linear(const LinearArgs& args);

}  // namespace fuselm::kernels
