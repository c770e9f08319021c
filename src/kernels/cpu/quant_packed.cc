#include "kernels/cpu/quant_packed.h"

#include "base/large_alloc.h"

#include <cstring>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_kernels.h"
#include "kernels/cpu/threading.h"
#include "kernels/cpu/tuning.h"

namespace fuselm::kernels {

void QuantPacked::Free::operator()(unsigned char* p) const { free_large(p, bytes); }

namespace {

// One 32-block of one row, unpacked: codes (q8_0: signed; else 0..15 or 0..31, the 5th bit set),
// and its scale and minimum as f16 (32-block types) or u8 sub-block values (k_scales).
struct RowBlock {
  uint8_t v[32];
  uint16_t d = 0, m = 0;
  uint8_t sc = 0, mn = 0;
  int8_t sc16[2] = {0, 0};  // q6_k: the scales of elements 0..15 and 16..31
};

template <class B>
void nibbles_of(const B& blk, uint8_t* v) {
  for (int t = 0; t < 16; ++t) v[t] = blk.qs[t] & 0xF, v[t + 16] = blk.qs[t] >> 4;
}

template <class B>
void fifth_bits_of(const B& blk, uint8_t* v) {
  uint32_t qh;
  std::memcpy(&qh, blk.qh, 4);
  for (int t = 0; t < 32; ++t) v[t] = static_cast<uint8_t>(v[t] | ((qh >> t) & 1u) << 4);
}

// Block b of a row of 32-block type t.
RowBlock unpack_block32(QuantType t, const unsigned char* row, int64_t b) {
  RowBlock r;
  switch (t) {
    case QuantType::q8_0: {
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
      std::memcpy(r.v, blk.qs, 32), r.d = blk.d;
      break;
    }
    case QuantType::q4_0: {
      const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
      nibbles_of(blk, r.v), r.d = blk.d;
      break;
    }
    case QuantType::q4_1: {
      const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
      nibbles_of(blk, r.v), r.d = blk.d, r.m = blk.m;
      break;
    }
    case QuantType::q5_0: {
      const auto& blk = reinterpret_cast<const BlockQ5_0*>(row)[b];
      nibbles_of(blk, r.v), fifth_bits_of(blk, r.v), r.d = blk.d;
      break;
    }
    default: {  // q5_1
      const auto& blk = reinterpret_cast<const BlockQ5_1*>(row)[b];
      nibbles_of(blk, r.v), fifth_bits_of(blk, r.v), r.d = blk.d, r.m = blk.m;
      break;
    }
  }
  return r;
}

// Sub-block sub (0..7, elements 32·sub..) of a Q4_K / Q5_K super-block: chunk sub/2's low (even
// sub) or high (odd) nibbles, Q5_K's 5th bit at bit sub of qh (ggml dequantize_row_q4_K / _q5_K).
template <class B>
RowBlock unpack_sub_k(const B& blk, int sub) {
  RowBlock r;
  uint8_t sc[8], mn[8];
  scales_mins_k4(blk.scales, sc, mn);
  r.sc = sc[sub], r.mn = mn[sub];
  const uint8_t* qs = blk.qs + 32 * (sub / 2);
  for (int t = 0; t < 32; ++t) {
    r.v[t] = sub % 2 ? qs[t] >> 4 : qs[t] & 0xF;
    if constexpr (sizeof(B) == sizeof(BlockQ5_K)) r.v[t] = static_cast<uint8_t>(r.v[t] | ((blk.qh[t] >> sub) & 1) << 4);
  }
  return r;
}

// Block b (0..7, elements 32b..) of a Q6_K super-block: element e's low 4 bits are nibble e/64 % 2
// of ql[64·(e/128) + e % 32 + 32·(e/32 % 2)], its high 2 bits bits 2·(e/32 % 4) of
// qh[32·(e/128) + e % 32], its scale scales[e/16] (ggml dequantize_row_q6_K).
RowBlock unpack_block_q6_k(const BlockQ6_K& blk, int b) {
  RowBlock r;
  for (int t = 0; t < 32; ++t) {
    const int e = 32 * b + t, n = e / 128, j = e % 128 / 32, l = e % 32;
    const int lo = blk.ql[64 * n + l + 32 * (j % 2)] >> (4 * (j / 2)) & 0xF;
    const int hi = blk.qh[32 * n + l] >> (2 * j) & 3;
    r.v[t] = static_cast<uint8_t>(lo | hi << 4);
  }
  r.sc16[0] = blk.scales[2 * b], r.sc16[1] = blk.scales[2 * b + 1];
  return r;
}

}  // namespace

void QuantPacked::place_regions() {
  const PackedLayout lay = layout();
  const int64_t gb = groups() * nb();
  int64_t off = gb * code_bytes();
  if (lay.fifth_bit) bits_ = off, off += gb * (lay.sixth_bit ? 128 : 64);
  scales_ = off, off += gb * 32;
  if (lay.has_min && !lay.k_scales) mins_ = off, off += gb * 32;
  if (lay.k_scales || lay.scales16) super_ = off, off += groups() * (nb() / 8) * 128;
  bytes_ = off;
}

void QuantPacked::pack_row(const void* row_ptr, int64_t j) {
  const auto* row = static_cast<const unsigned char*>(row_ptr);
  const PackedLayout lay = layout();
  const int64_t g = j / 16;
  const int l = static_cast<int>(j % 16);
  for (int64_t b = 0; b < nb(); ++b) {
    RowBlock r;
    if (lay.scales16) {
      const auto& blk = reinterpret_cast<const BlockQ6_K*>(row)[b / 8];
      r = unpack_block_q6_k(blk, static_cast<int>(b % 8));
      reinterpret_cast<float*>(mut(super_))[(g * (nb() / 8) + b / 8) * 32 + l] = f16_to_f32(blk.d);
      auto* ks = reinterpret_cast<int8_t*>(mut(scales_) + (g * nb() + b) * 32);
      ks[l] = r.sc16[0], ks[16 + l] = r.sc16[1];
    } else if (lay.k_scales) {
      const int64_t s = b / 8;
      const auto* k4 = reinterpret_cast<const BlockQ4_K*>(row) + s;  // d, dmin, scales: same place in Q5_K
      const auto* k5 = reinterpret_cast<const BlockQ5_K*>(row) + s;
      r = type_ == QuantType::q4_k ? unpack_sub_k(*k4, static_cast<int>(b % 8)) : unpack_sub_k(*k5, static_cast<int>(b % 8));
      auto* sup = reinterpret_cast<float*>(mut(super_)) + (g * (nb() / 8) + s) * 32;
      const uint16_t d = type_ == QuantType::q4_k ? k4->d : k5->d, dmin = type_ == QuantType::q4_k ? k4->dmin : k5->dmin;
      sup[l] = f16_to_f32(d), sup[16 + l] = -f16_to_f32(dmin);
      uint8_t* ks = mut(scales_) + (g * nb() + b) * 32;
      ks[l] = r.sc, ks[16 + l] = r.mn;
    } else {
      r = unpack_block32(type_, row, b);
      reinterpret_cast<uint16_t*>(mut(scales_))[(g * nb() + b) * 16 + l] = r.d;
      if (lay.has_min) reinterpret_cast<uint16_t*>(mut(mins_))[(g * nb() + b) * 16 + l] = r.m;
    }
    unsigned char* c = mut(0) + (g * nb() + b) * code_bytes();
    if (!lay.nibbles) {
      for (int kg = 0; kg < 8; ++kg) std::memcpy(c + 64 * kg + 4 * l, r.v + 4 * kg, 4);
      continue;
    }
    for (int q = 0; q < 4; ++q)
      for (int t = 0; t < 4; ++t)
        c[64 * q + 4 * l + t] = static_cast<unsigned char>((r.v[4 * q + t] & 0xF) | (r.v[16 + 4 * q + t] & 0xF) << 4);
    if (lay.fifth_bit) {
      auto* m = reinterpret_cast<uint64_t*>(mut(bits_)) + (g * nb() + b) * (lay.sixth_bit ? 16 : 8);
      for (int plane = 0; plane < (lay.sixth_bit ? 2 : 1); ++plane)
        for (int q = 0; q < 4; ++q)
          for (int t = 0; t < 4; ++t) {
            m[8 * plane + q] |= static_cast<uint64_t>(r.v[4 * q + t] >> (4 + plane) & 1) << (4 * l + t);
            m[8 * plane + 4 + q] |= static_cast<uint64_t>(r.v[16 + 4 * q + t] >> (4 + plane) & 1) << (4 * l + t);
          }
    }
  }
}

QuantPacked QuantPacked::pack(QuantType type, const void* w, int64_t ldw_bytes, int64_t n, int64_t k) {
  if (!packable(type))
    throw std::invalid_argument(fmt::format("QuantPacked: no packed layout for {}", quant_info(type).name));
  const int64_t row_bytes = quant_row_bytes(type, k);
  if (n < 0) throw std::invalid_argument(fmt::format("QuantPacked: n = {}", n));
  if (ldw_bytes == 0) ldw_bytes = row_bytes;
  QuantPacked p;
  p.type_ = type;
  p.n_ = n;
  p.k_ = k;
  p.place_regions();
  const size_t bytes = (static_cast<size_t>(p.bytes_) + 63) & ~size_t{63};
  p.data_ = std::unique_ptr<unsigned char, Free>(static_cast<unsigned char*>(allocate_large(bytes)), Free{bytes});
  std::memset(p.data_.get(), 0, bytes);  // padding rows: zero codes and zero scales
  const auto* src = static_cast<const unsigned char*>(w);
  for (int64_t j = 0; j < n; ++j) p.pack_row(src + j * ldw_bytes, j);
  return p;
}

float QuantPacked::scale(int64_t g, int64_t b, int l, int h) const {
  if (layout().scales16) return ksuper(g, b / 8)[l] * static_cast<float>(scales16(g, b)[16 * h + l]);
  if (layout().k_scales) return ksuper(g, b / 8)[l] * static_cast<float>(kscales(g, b)[l]);
  return f16_to_f32(scales(g, b)[l]);
}

float QuantPacked::min(int64_t g, int64_t b, int l) const {
  const PackedLayout lay = layout();
  if (!lay.has_min) return 0.f;
  if (lay.k_scales) return ksuper(g, b / 8)[16 + l] * static_cast<float>(kscales(g, b)[16 + l]);
  return f16_to_f32(mins(g, b)[l]);
}

int QuantPacked::code(int64_t g, int64_t b, int l, int t) const {
  const unsigned char* c = codes(g, b);
  if (type_ == QuantType::q8_0) return static_cast<int8_t>(c[64 * (t / 4) + 4 * l + t % 4]);
  const PackedLayout lay = layout();
  const int lo = t % 16, byte_index = 64 * (lo / 4) + 4 * l + lo % 4;
  int v = t < 16 ? c[byte_index] & 0xF : c[byte_index] >> 4;
  for (int plane = 0; plane < (lay.sixth_bit ? 2 : lay.fifth_bit ? 1 : 0); ++plane)
    v |= static_cast<int>(bits(g, b)[8 * plane + (t < 16 ? 0 : 4) + lo / 4] >> (4 * l + lo % 4) & 1) << (4 + plane);
  return v - lay.offset;
}

void quant_linear_packed(const QuantPacked& w, const float* x, int64_t lda, const float* bias, float* y,
                         int64_t ldy, int64_t m) {
  const int64_t k = w.k(), n = w.n();
  if (lda == 0) lda = k;
  if (ldy == 0) ldy = n;
  if (m < 0 || lda < k || ldy < n)
    throw std::invalid_argument(fmt::format("quant_linear_packed: m {} lda {} ldy {} for k {} n {}", m, lda, ldy, k, n));
  if (m == 0 || n == 0) return;
  if (!y || (k > 0 && !x)) throw std::invalid_argument("quant_linear_packed: x or y is null");
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) y[i * ldy + j] = bias ? bias[j] : 0.f;
    return;
  }
  void* scratch = thread_scratch(4, static_cast<size_t>(q8_acts_bytes(m, k, 32) + 3) / 4);
  const Q8Acts acts = quantize_acts(x, lda, m, k, 32, scratch);
  const PackedProblem p{&w, bias, y, ldy, m, cpu_tuning().packed_decode_prefetch};
  const QuantKernels& kern = quant_kernels();
  const int nt = kernel_threads(n * k * (m < 8 ? 1 : m / 8 + 1), int64_t{1} << 14);
  parallel_for_chunks(nt, w.groups(), 1, linear_parts(nt, m), [&](int64_t g0, int64_t g1) { kern.packed(p, acts, g0, g1); });
}

}  // namespace fuselm::kernels
