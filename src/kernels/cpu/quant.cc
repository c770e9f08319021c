#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_kernels.h"
#include "kernels/cpu/threading.h"

#include "isa/quant_tables.inc"

namespace fuselm::kernels {
namespace {

constexpr QuantTypeInfo kInfo[] = {
    {"q8_0", 8, 32, 34},    {"q4_0", 2, 32, 18},    {"q4_1", 3, 32, 20},
    {"q4_k", 12, 256, 144}, {"q5_k", 13, 256, 176}, {"q6_k", 14, 256, 210},
    {"q5_0", 6, 32, 22},    {"q5_1", 7, 32, 24},
};

float h(uint16_t v) { return f16_to_f32(v); }

void dequant_q8_0(const BlockQ8_0* b, float* y) {
  const float d = h(b->d);
  for (int j = 0; j < kQK; ++j) y[j] = b->qs[j] * d;
}
void dequant_q4_0(const BlockQ4_0* b, float* y) {
  const float d = h(b->d);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = ((b->qs[j] & 0xF) - 8) * d;
    y[j + 16] = ((b->qs[j] >> 4) - 8) * d;
  }
}
void dequant_q4_1(const BlockQ4_1* b, float* y) {
  const float d = h(b->d), m = h(b->m);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = (b->qs[j] & 0xF) * d + m;
    y[j + 16] = (b->qs[j] >> 4) * d + m;
  }
}
// Q5_0 / Q5_1: element j's 5th bit is bit j of qh (ggml dequantize_row_q5_0 / _q5_1).
template <class B>
void dequant_q5(const B* b, float* y) {
  uint32_t qh;
  std::memcpy(&qh, b->qh, 4);
  const float d = h(b->d);
  for (int j = 0; j < kQK / 2; ++j) {
    const int x0 = (b->qs[j] & 0xF) | ((qh >> j) << 4 & 0x10);
    const int x1 = (b->qs[j] >> 4) | ((qh >> (j + 16)) << 4 & 0x10);
    if constexpr (sizeof(B) == sizeof(BlockQ5_0)) {
      y[j] = static_cast<float>(x0 - 16) * d;
      y[j + 16] = static_cast<float>(x1 - 16) * d;
    } else {
      const float m = h(b->m);
      y[j] = static_cast<float>(x0) * d + m;
      y[j + 16] = static_cast<float>(x1) * d + m;
    }
  }
}
// Q4_K and Q5_K: chunk c of 64 elements uses (scale, min) 2c and 2c+1 (ggml dequantize_row_q4_K).
template <class B>
void dequant_k45(const B* b, float* y) {
  const float d = h(b->d), dmin = h(b->dmin);
  for (int c = 0; c < 4; ++c) {
    uint8_t sc, m;
    for (int half = 0; half < 2; ++half) {
      scale_min_k4(2 * c + half, b->scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      for (int l = 0; l < 32; ++l) {
        int q = half ? b->qs[32 * c + l] >> 4 : b->qs[32 * c + l] & 0xF;
        if constexpr (sizeof(B) == sizeof(BlockQ5_K)) q += (b->qh[l] >> (2 * c + half) & 1) << 4;
        y[64 * c + 32 * half + l] = d1 * q - m1;
      }
    }
  }
}
void dequant_q6_k(const BlockQ6_K* b, float* y) {
  const float d = h(b->d);
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = b->ql + 64 * n;
    const uint8_t* qh = b->qh + 32 * n;
    const int8_t* sc = b->scales + 8 * n;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0 & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2 & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
      y[128 * n + l] = d * sc[is] * q1;
      y[128 * n + l + 32] = d * sc[is + 2] * q2;
      y[128 * n + l + 64] = d * sc[is + 4] * q3;
      y[128 * n + l + 96] = d * sc[is + 6] * q4;
    }
  }
}

// roundf (ties away from zero) for |v| < 2^31 without the library call: truncate, then step by
// the fraction, which v - trunc(v) gives exactly below 2^23 (and above it v is an integer).
inline int round_away(float v) {
  int i = static_cast<int>(v);
  const float frac = v - static_cast<float>(i);
  i += frac >= 0.5f ? 1 : 0;
  i -= frac <= -0.5f ? 1 : 0;
  return i;
}

// ggml quantize_row_q8_0_ref. Compiled without FMA contraction (no FMA outside the ISA regions),
// so the float arithmetic is the reference's. fmax and roundf are written as comparisons
// (round_away): the same values, with no library call per weight (quantizing a model's weights at
// load spent most of its time in those calls).
void quantize_q8_0(const float* x, BlockQ8_0* b) {
  float amax = 0.f;
  for (int j = 0; j < kQK; ++j) {
    const float a = std::fabs(x[j]);
    amax = a > amax ? a : amax;  // fmax: a NaN never replaces amax
  }
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  b->d = f32_to_f16(d);
  for (int j = 0; j < kQK; ++j) b->qs[j] = static_cast<int8_t>(round_away(x[j] * id));
}
// ggml quantize_row_q4_0_ref: the scale maps the value of largest magnitude to -8.
void quantize_q4_0(const float* x, BlockQ4_0* b) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < kQK; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  const float d = max / -8.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  b->d = f32_to_f16(d);
  for (int j = 0; j < kQK / 2; ++j) {
    const float x0 = x[j] * id, x1 = x[j + 16] * id;
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f)));
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f)));
    b->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void check_block(QuantType t, int64_t k, const char* what) {
  if (k < 0 || k % quant_info(t).block_elems != 0)
    throw std::invalid_argument(fmt::format("{}: k = {} is not a multiple of the {}-element {} block", what, k,
                                            quant_info(t).block_elems, quant_info(t).name));
}

// Round to nearest, ties to even, for |v| < 2^22 (the activations' |v| <= 127).
inline float round_even(float v) { return (v + 12582912.f) - 12582912.f; }

void quantize_act_row(const float* x, int64_t k, int64_t block, int8_t* q, float* d, int16_t* sum16, float* dsum) {
  for (int64_t b = 0; b < k / block; ++b) {
    const float* xb = x + b * block;
    // Comparisons instead of std::fmax/fmin (library calls that the compiler keeps scalar for their
    // NaN rules): the same values for finite x, and loops that vectorize (prefill quantizes every
    // activation of every linear).
    float amax = 0.f;
    for (int64_t j = 0; j < block; ++j) {
      const float a = std::fabs(xb[j]);
      amax = a > amax ? a : amax;
    }
    const float db = amax / 127.f;
    const float id = db != 0.f ? 127.f / amax : 0.f;
    d[b] = db;
    for (int64_t j = 0; j < block; ++j) {
      float v = round_even(xb[j] * id);
      v = v > 127.f ? 127.f : v;
      v = v < -127.f ? -127.f : v;
      q[b * block + j] = static_cast<int8_t>(v);
    }
  }
  for (int64_t g = 0; g < k / 16; ++g) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += q[16 * g + j];
    sum16[g] = static_cast<int16_t>(s);
  }
  for (int64_t c = 0; c < k / 32; ++c) dsum[c] = d[c * 32 / block] * static_cast<float>(sum16[2 * c] + sum16[2 * c + 1]);
}

int64_t align64(int64_t n) { return (n + 63) & ~int64_t{63}; }

}  // namespace

const QuantKernels& quant_kernels() { return isa_kernels<QuantKernels>(); }

const QuantTypeInfo& quant_info(QuantType t) { return kInfo[static_cast<int>(t)]; }

std::optional<QuantType> quant_type_from_ggml(uint32_t ggml_type) {
  for (QuantType t : kAllQuantTypes)
    if (quant_info(t).ggml_type == ggml_type) return t;
  return std::nullopt;
}

std::optional<QuantType> parse_quant_type(std::string_view name) {
  for (QuantType t : kAllQuantTypes)
    if (name == quant_info(t).name) return t;
  return std::nullopt;
}

int64_t quant_row_bytes(QuantType t, int64_t k) {
  check_block(t, k, "quant_row_bytes");
  return k / quant_info(t).block_elems * quant_info(t).block_bytes;
}

void dequantize_row(QuantType t, const void* src, float* dst, int64_t k) {
  check_block(t, k, "dequantize_row");
  const auto* s = static_cast<const unsigned char*>(src);
  const QuantTypeInfo& info = quant_info(t);
  for (int64_t b = 0; b < k / info.block_elems; ++b) {
    const unsigned char* blk = s + b * info.block_bytes;
    float* y = dst + b * info.block_elems;
    switch (t) {
      case QuantType::q8_0: dequant_q8_0(reinterpret_cast<const BlockQ8_0*>(blk), y); break;
      case QuantType::q4_0: dequant_q4_0(reinterpret_cast<const BlockQ4_0*>(blk), y); break;
      case QuantType::q4_1: dequant_q4_1(reinterpret_cast<const BlockQ4_1*>(blk), y); break;
      case QuantType::q4_k: dequant_k45(reinterpret_cast<const BlockQ4_K*>(blk), y); break;
      case QuantType::q5_k: dequant_k45(reinterpret_cast<const BlockQ5_K*>(blk), y); break;
      case QuantType::q6_k: dequant_q6_k(reinterpret_cast<const BlockQ6_K*>(blk), y); break;
      case QuantType::q5_0: dequant_q5(reinterpret_cast<const BlockQ5_0*>(blk), y); break;
      case QuantType::q5_1: dequant_q5(reinterpret_cast<const BlockQ5_1*>(blk), y); break;
    }
  }
}

void quantize_row(QuantType t, const float* src, void* dst, int64_t k) {
  check_block(t, k, "quantize_row");
  if (t != QuantType::q8_0 && t != QuantType::q4_0)
    throw std::invalid_argument(fmt::format("quantize_row: no quantizer for {} (q8_0 and q4_0 only)", quant_info(t).name));
  auto* d = static_cast<unsigned char*>(dst);
  for (int64_t b = 0; b < k / kQK; ++b) {
    if (t == QuantType::q8_0)
      quantize_q8_0(src + b * kQK, reinterpret_cast<BlockQ8_0*>(d + b * sizeof(BlockQ8_0)));
    else
      quantize_q4_0(src + b * kQK, reinterpret_cast<BlockQ4_0*>(d + b * sizeof(BlockQ4_0)));
  }
}

int64_t q8_acts_bytes(int64_t m, int64_t k, int64_t block) {
  return align64(m * k) + align64(m * (k / block) * 4) + align64(m * (k / 16) * 2) + align64(m * (k / 32) * 4);
}

Q8Acts quantize_acts(const float* x, int64_t lda, int64_t m, int64_t k, int64_t block, void* scratch) {
  if ((block != 32 && block != 256) || k % block != 0)
    throw std::invalid_argument(fmt::format("quantize_acts: k = {} is not a multiple of the block {}", k, block));
  auto* base = static_cast<unsigned char*>(scratch);
  auto* q = reinterpret_cast<int8_t*>(base);
  auto* d = reinterpret_cast<float*>(base + align64(m * k));
  auto* s = reinterpret_cast<int16_t*>(base + align64(m * k) + align64(m * (k / block) * 4));
  auto* ds = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(s) + align64(m * (k / 16) * 2));
  const int64_t nb = k / block;
  const int nt = kernel_threads(m * k, int64_t{1} << 15);
  const auto simd = quant_kernels().quantize;
  parallel_for_ranges(nt, m, 1, [&](int64_t i0, int64_t i1) {
    if (simd) return simd(x, lda, i0, i1, k, block, q, d, s, ds);
    for (int64_t i = i0; i < i1; ++i) quantize_act_row(x + i * lda, k, block, q + i * k, d + i * nb, s + i * (k / 16), ds + i * (k / 32));
  });
  return {q, d, s, ds, k, block};
}

const char* quant_kernel_path() { return quant_kernels().name; }

void quant_linear(const QuantLinearArgs& a) {
  if (a.m < 0 || a.n < 0 || a.k < 0)
    throw std::invalid_argument(fmt::format("quant_linear: negative size m={} n={} k={}", a.m, a.n, a.k));
  check_block(a.w_type, a.k, "quant_linear");
  const QuantTypeInfo& info = quant_info(a.w_type);
  QuantProblem p{a.w_type, static_cast<const unsigned char*>(a.w), a.ldw_bytes, a.bias, a.y,
                 a.ldy,    a.m,                                     a.n,         a.k};
  const int64_t row_bytes = quant_row_bytes(a.w_type, a.k);
  const int64_t lda = a.lda ? a.lda : a.k;
  if (p.ldw == 0) p.ldw = row_bytes;
  if (p.ldy == 0) p.ldy = a.n;
  if (lda < a.k || p.ldy < a.n || p.ldw < row_bytes)
    throw std::invalid_argument(fmt::format("quant_linear: strides lda {} ldy {} ldw {} below k {} n {} row bytes {}", lda,
                                            p.ldy, p.ldw, a.k, a.n, row_bytes));
  if (p.m == 0 || p.n == 0) return;
  if (!a.y || (a.k > 0 && (!a.x || !a.w))) throw std::invalid_argument("quant_linear: x, w or y is null");
  if (a.k == 0) {
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) p.y[i * p.ldy + j] = p.bias ? p.bias[j] : 0.f;
    return;
  }
  // The calling thread's scratch (slot 4: no other kernel uses it) holds the quantized rows.
  void* scratch = thread_scratch(4, static_cast<size_t>(q8_acts_bytes(p.m, p.k, info.block_elems) + 3) / 4);
  const Q8Acts acts = quantize_acts(a.x, lda, p.m, p.k, info.block_elems, scratch);
  const QuantKernels& kern = quant_kernels();
  // As linear: a thread's share should outweigh waking it; split output columns (rows of W).
  const int nt = kernel_threads(p.n * p.k * (p.m < 8 ? 1 : p.m / 8 + 1), int64_t{1} << 14);
  // Decode takes parts as threads come free (linear_parts; linear.cc says why).
  parallel_for_chunks(nt, p.n, /*align=*/16, linear_parts(nt, p.m), [&](int64_t n0, int64_t n1) { kern.rows(p, acts, n0, n1); });
}

}  // namespace fuselm::kernels
