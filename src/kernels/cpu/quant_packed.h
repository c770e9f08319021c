#pragma once
// Weights of every block type repacked once (at load) into 16-row interleaved blocks for the
// integer kernels. For a group of 16 weight rows and one 32-element block b:
//
//   codes   q8_0: 8 × 64 B, k-group kg (k = 4kg..4kg+3), lane l = row 16g+l, signed codes
//           the rest: 4 × 64 B of nibble pairs; lane l of vector q holds 4 bytes whose low
//           nibbles are k = 4q..4q+3 and high nibbles k = 16+4q..16+4q+3 (ggml's q4_0 byte order)
//   bits    q5_0, q5_1, q5_k, q6_k: 8 × 64-bit masks, one bit per code byte of the 4 vectors (bit
//           4l+t of mask q: the 5th bit of the low nibble t of lane l; mask 4+q: of the high
//           nibble), so that one masked add puts the 5th bits into the unpacked nibbles; q6_k:
//           8 more of its 6th bits
//   scales  32-blocks: the 16 f16 scales; q4_k, q5_k: 16 u8 sub-block scales, 16 u8 minimums;
//           q6_k: 16 i8 scales of elements 0..15 (the low nibbles), 16 of 16..31 (the high ones)
//   mins    q4_1, q5_1: the 16 f16 minimums
//   super   q4_k, q5_k, q6_k: per 256 elements (8 blocks), 16 fp32 d then 16 fp32 -dmin (q6_k:
//           unused), so that a block's scale d·sc and minimum -dmin·m are exact fp32 products
//           (ggml's d1, m1)
//
// Each region is one array over (group, block) (codes stay 64-byte aligned), and the bytes per
// row are the GGUF's (the K-quants: about one byte more per 32 elements); the last group is padded
// with zero-scale rows. A block then costs one vpdpbusd per 64 code bytes for all 16 rows, the 16
// scales are one vector, and an activation's 4 bytes are a broadcast, so decode streams the
// weights at memory speed and prefill runs 64 int8 multiply-adds per instruction. Values are
// those of quant.h's dequantize_row, exactly: x = s·(q - offset) (+ min).
#include <cstdint>
#include <memory>

#include "kernels/cpu/quant.h"

namespace fuselm::kernels {

/// What the kernels need to know of a packed type's codes and scales (see the layout above).
struct PackedLayout {
  bool nibbles = false;    // codes as nibble pairs (all but q8_0)
  bool fifth_bit = false;  // q5_*: the bits masks
  bool has_min = false;    // x = s·q + min (q4_1, q5_1, q4_k, q5_k)
  bool k_scales = false;   // u8 sub-block scale and minimum times the super-block's fp32 d, -dmin
  bool sixth_bit = false;  // q6_k: a second bits plane
  bool scales16 = false;   // q6_k: an i8 scale per 16 elements times the super-block's fp32 d
  int offset = 0;          // x = s·(q - offset): q4_0 8, q5_0 16, q6_k 32 (q8_0's codes are signed: 0)
};

constexpr PackedLayout packed_layout(QuantType t) {
  switch (t) {
    case QuantType::q8_0: return {};
    case QuantType::q4_0: return {true, false, false, false, false, false, 8};
    case QuantType::q5_0: return {true, true, false, false, false, false, 16};
    case QuantType::q4_1: return {true, false, true, false, false, false, 0};
    case QuantType::q5_1: return {true, true, true, false, false, false, 0};
    case QuantType::q4_k: return {true, false, true, true, false, false, 0};
    case QuantType::q5_k: return {true, true, true, true, false, false, 0};
    case QuantType::q6_k: return {true, true, false, false, true, true, 32};
    default: return {};
  }
}

/// Weights [n, k] of one packable type in the 16-row interleaved layout. Move-only.
class QuantPacked {
 public:
  /// Repacks n rows of k (a multiple of the block) from ggml blocks at `w` (row stride ldw_bytes,
  /// 0: dense). Throws std::invalid_argument for another type or a partial block.
  static QuantPacked pack(QuantType type, const void* w, int64_t ldw_bytes, int64_t n, int64_t k);
  /// Whether `type` has a packed layout (every QuantType).
  static bool packable(QuantType) { return true; }

  QuantType type() const { return type_; }
  PackedLayout layout() const { return packed_layout(type_); }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t groups() const { return (n_ + 15) / 16; }
  /// Code bytes of one group's block: 512 (q8_0) or 256 (nibbles).
  int64_t code_bytes() const { return type_ == QuantType::q8_0 ? 512 : 256; }
  /// Codes of group g (rows 16g..16g+15), block b (elements 32b..32b+31); 64-byte aligned.
  const unsigned char* codes(int64_t g, int64_t b) const { return at(0) + (g * nb() + b) * code_bytes(); }
  /// q5_*, q6_k: the 8 fifth-bit masks of group g, block b (q6_k: then the 8 sixth-bit masks).
  const uint64_t* bits(int64_t g, int64_t b) const {
    return reinterpret_cast<const uint64_t*>(at(bits_)) + (g * nb() + b) * (layout().sixth_bit ? 16 : 8);
  }
  /// 32-block types: the 16 f16 scales of group g, block b (row 16g+l at l).
  const uint16_t* scales(int64_t g, int64_t b) const {
    return reinterpret_cast<const uint16_t*>(at(scales_)) + (g * nb() + b) * 16;
  }
  /// q4_1, q5_1: the 16 f16 minimums of group g, block b.
  const uint16_t* mins(int64_t g, int64_t b) const {
    return reinterpret_cast<const uint16_t*>(at(mins_)) + (g * nb() + b) * 16;
  }
  /// q4_k, q5_k: the 16 u8 sub-block scales of group g, block b, then the 16 u8 minimums.
  const uint8_t* kscales(int64_t g, int64_t b) const { return at(scales_) + (g * nb() + b) * 32; }
  /// q6_k: the 16 i8 scales of group g, block b's elements 0..15, then those of 16..31.
  const int8_t* scales16(int64_t g, int64_t b) const { return reinterpret_cast<const int8_t*>(kscales(g, b)); }
  /// K-quants: 16 fp32 d of group g's super-block s (blocks 8s..8s+7), then 16 fp32 -dmin.
  const float* ksuper(int64_t g, int64_t s) const {
    return reinterpret_cast<const float*>(at(super_)) + (g * (nb() / 8) + s) * 32;
  }
  /// Row 16g+l's scale of block b's elements 16h..16h+15 (h 0 or 1) and its minimum in fp32 (the
  /// plain kernel).
  float scale(int64_t g, int64_t b, int l, int h) const;
  float min(int64_t g, int64_t b, int l) const;
  /// Row 16g+l's code of element t of block b, minus the layout's offset (the plain kernel).
  int code(int64_t g, int64_t b, int l, int t) const;
  /// Bytes held.
  int64_t bytes() const { return bytes_; }

 private:
  struct Free {
    size_t bytes;  // as allocated (base/large_alloc.h); value-initialized to 0 with the pointer
    void operator()(unsigned char* p) const;
  };
  int64_t nb() const { return k_ / 32; }
  const unsigned char* at(int64_t offset) const { return data_.get() + offset; }
  unsigned char* mut(int64_t offset) { return data_.get() + offset; }
  void place_regions();
  void pack_row(const void* row, int64_t j);

  QuantType type_ = QuantType::q8_0;
  int64_t n_ = 0, k_ = 0;
  int64_t bits_ = 0, scales_ = 0, mins_ = 0, super_ = 0, bytes_ = 0;  // region offsets, total
  std::unique_ptr<unsigned char, Free> data_;
};

/// y = x · Wᵀ + bias for packed W: x fp32 [m, k] (row stride lda, 0: k), bias fp32 [n] or null,
/// y fp32 [m, n] (row stride ldy, 0: n). Activations are quantized per 32 as for quant_linear
/// (the calling thread's scratch; no allocation at a steady shape); threads split row groups.
void quant_linear_packed(const QuantPacked& w, const float* x, int64_t lda, const float* bias, float* y,
                         int64_t ldy, int64_t m);

}  // namespace fuselm::kernels
