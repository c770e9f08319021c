#pragma once
// q8_0, q4_0 and q4_1 weights repacked once (at load) into 16-row interleaved blocks for the integer
// kernels: for a group of 16 weight rows and one 32-element block, the codes with the 16 rows as
// the 16 int32 lanes of a vector (4 consecutive k per lane), and the 16 f16 scales (a separate
// array, so that code vectors stay 64-byte aligned):
//
//   q8_0  8 × 64 B:  k-group kg (k = 4kg..4kg+3), lane l = row 16g+l, signed codes
//   q4_0  4 × 64 B:  lane l holds bytes qs[4p..4p+3] of row 16g+l's block: the low nibbles are
//   q4_1             k = 4p..4p+3, the high nibbles k = 16+4p..16+4p+3 (q4_1: and a third array
//                    of the 16 f16 minimums)
//
// The same bytes per row as the GGUF blocks (34 / 18 per 32 elements; the last group padded with
// zero-scale rows). A block then costs one vpdpbusd per 64 bytes for all 16 rows, the 16 scales
// are one vector, and an activation's 4 bytes are a broadcast, so decode streams the weights at
// memory speed and prefill runs 64 int8 multiply-adds per instruction.
#include <cstdint>
#include <memory>

#include "kernels/cpu/quant.h"

namespace fuselm::kernels {

/// Weights [n, k] of a q8_0, q4_0 or q4_1 tensor in the 16-row interleaved layout. Move-only.
class QuantPacked {
 public:
  /// Repacks n rows of k (a multiple of 32) from ggml blocks at `w` (row stride ldw_bytes, 0:
  /// dense). Throws std::invalid_argument for another type or a partial block.
  static QuantPacked pack(QuantType type, const void* w, int64_t ldw_bytes, int64_t n, int64_t k);
  /// Whether `type` has a packed layout (q8_0, q4_0, q4_1).
  static bool packable(QuantType type) {
    return type == QuantType::q8_0 || type == QuantType::q4_0 || type == QuantType::q4_1;
  }

  QuantType type() const { return type_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t groups() const { return (n_ + 15) / 16; }
  /// Code bytes of one group's block: 512 (q8_0) or 256 (q4_0, q4_1).
  int64_t code_bytes() const { return type_ == QuantType::q8_0 ? 512 : 256; }
  /// Codes of group g (rows 16g..16g+15), block b (elements 32b..32b+31); 64-byte aligned.
  const unsigned char* codes(int64_t g, int64_t b) const { return data_.get() + (g * (k_ / 32) + b) * code_bytes(); }
  /// The 16 f16 scales of group g, block b (row 16g+l at l).
  const uint16_t* scales(int64_t g, int64_t b) const {
    return reinterpret_cast<const uint16_t*>(data_.get() + groups() * (k_ / 32) * code_bytes()) + (g * (k_ / 32) + b) * 16;
  }
  /// q4_1: the 16 f16 minimums of group g, block b (after all the scales).
  const uint16_t* mins(int64_t g, int64_t b) const { return scales(g, b) + groups() * (k_ / 32) * 16; }
  /// Bytes held: codes, then scales, then (q4_1) minimums.
  int64_t bytes() const { return groups() * (k_ / 32) * (code_bytes() + (type_ == QuantType::q4_1 ? 64 : 32)); }

 private:
  struct Free {
    size_t bytes;  // as allocated (base/large_alloc.h); value-initialized to 0 with the pointer
    void operator()(unsigned char* p) const;
  };
  QuantType type_ = QuantType::q8_0;
  int64_t n_ = 0, k_ = 0;
  std::unique_ptr<unsigned char, Free> data_;
};

/// y = x · Wᵀ + bias for packed W: x fp32 [m, k] (row stride lda, 0: k), bias fp32 [n] or null,
/// y fp32 [m, n] (row stride ldy, 0: n). Activations are quantized per 32 as for quant_linear
/// (the calling thread's scratch; no allocation at a steady shape); threads split row groups.
void quant_linear_packed(const QuantPacked& w, const float* x, int64_t lda, const float* bias, float* y,
                         int64_t ldy, int64_t m);

}  // namespace fuselm::kernels
