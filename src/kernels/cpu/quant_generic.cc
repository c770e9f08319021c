// quant_linear's plain C++ path: integer dot products block by block (the reference the SIMD
// paths follow: the same integer sums, scaled per block in fp32).
#include <cstdint>
#include <cstring>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_kernels.h"
#include "kernels/cpu/quant_packed.h"

namespace fuselm::kernels {
namespace {

float h(uint16_t v) { return f16_to_f32(v); }

// Sum of 32 int8 activations of block b (from the sums per 16).
int sum32(const int16_t* s, int64_t b) { return s[2 * b] + s[2 * b + 1]; }

float dot_q8_0(const BlockQ8_0* w, const int8_t* q, const float* d, const int16_t*, int64_t nb) {
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    int s = 0;
    for (int j = 0; j < kQK; ++j) s += w[b].qs[j] * q[b * kQK + j];
    acc += h(w[b].d) * d[b] * static_cast<float>(s);
  }
  return acc;
}

// Q4_0: Σ d_w·d_x·(Σ q·x - 8·Σ x); Q4_1: Σ d_w·d_x·Σ q·x + m_w·d_x·Σ x.
template <class B>
float dot_q4(const B* w, const int8_t* q, const float* d, const int16_t* s16, int64_t nb) {
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    int s = 0;
    for (int j = 0; j < kQK / 2; ++j)
      s += (w[b].qs[j] & 0xF) * q[b * kQK + j] + (w[b].qs[j] >> 4) * q[b * kQK + j + 16];
    const float dx = d[b];
    if constexpr (sizeof(B) == sizeof(BlockQ4_0))
      acc += h(w[b].d) * dx * static_cast<float>(s - 8 * sum32(s16, b));
    else
      acc += h(w[b].d) * dx * static_cast<float>(s) + h(w[b].m) * dx * static_cast<float>(sum32(s16, b));
  }
  return acc;
}

// Q5_0: Σ d_w·d_x·(Σ q·x - 16·Σ x); Q5_1: Σ d_w·d_x·Σ q·x + m_w·d_x·Σ x (q: 5 bits, qh bit j).
template <class B>
float dot_q5(const B* w, const int8_t* q, const float* d, const int16_t* s16, int64_t nb) {
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    uint32_t qh;
    std::memcpy(&qh, w[b].qh, 4);
    int s = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = (w[b].qs[j] & 0xF) | ((qh >> j & 1) << 4), x1 = (w[b].qs[j] >> 4) | ((qh >> (j + 16) & 1) << 4);
      s += x0 * q[b * kQK + j] + x1 * q[b * kQK + j + 16];
    }
    const float dx = d[b];
    if constexpr (sizeof(B) == sizeof(BlockQ5_0))
      acc += h(w[b].d) * dx * static_cast<float>(s - 16 * sum32(s16, b));
    else
      acc += h(w[b].d) * dx * static_cast<float>(s) + h(w[b].m) * dx * static_cast<float>(sum32(s16, b));
  }
  return acc;
}

// Q4_K / Q5_K super-block: d·d_x·Σ_c sc_c·(Σ q·x)_c - dmin·d_x·Σ_c m_c·(Σ x)_c over 32-chunks c.
template <class B>
float dot_k45(const B* w, const int8_t* q, const float* d, const int16_t* s16, int64_t nb) {
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    const B& blk = w[b];
    const int8_t* x = q + b * kQKK;
    int sumi = 0, summ = 0;
    for (int c = 0; c < 8; ++c) {
      uint8_t sc, m;
      scale_min_k4(c, blk.scales, sc, m);
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        int v = c % 2 ? blk.qs[32 * (c / 2) + l] >> 4 : blk.qs[32 * (c / 2) + l] & 0xF;
        if constexpr (sizeof(B) == sizeof(BlockQ5_K)) v += (blk.qh[l] >> c & 1) << 4;
        s += v * x[32 * c + l];
      }
      sumi += sc * s;
      summ += m * (s16[b * 16 + 2 * c] + s16[b * 16 + 2 * c + 1]);
    }
    acc += h(blk.d) * d[b] * static_cast<float>(sumi) - h(blk.dmin) * d[b] * static_cast<float>(summ);
  }
  return acc;
}

// Q6_K super-block: d·d_x·Σ_g sc_g·(Σ q·x - 32·Σ x)_g over 16-groups g.
float dot_q6_k(const BlockQ6_K* w, const int8_t* q, const float* d, const int16_t* s16, int64_t nb) {
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& blk = w[b];
    const int8_t* x = q + b * kQKK;
    int sumi = 0;
    for (int e = 0; e < kQKK; e += 16) {
      int s = 0;
      for (int t = e; t < e + 16; ++t) {
        const int n = t / 128, r = t % 128 / 32, l = t % 32;
        const uint8_t lo = blk.ql[64 * n + l + 32 * (r % 2)];
        const int v = ((r < 2 ? lo & 0xF : lo >> 4) | ((blk.qh[32 * n + l] >> (2 * r) & 3) << 4));
        s += v * x[t];
      }
      sumi += blk.scales[e / 16] * (s - 32 * s16[b * 16 + e / 16]);
    }
    acc += h(blk.d) * d[b] * static_cast<float>(sumi);
  }
  return acc;
}

float dot(const QuantProblem& p, const Q8Acts& a, int64_t j, int64_t i) {
  const unsigned char* w = p.w + j * p.ldw;
  const int64_t nb = p.k / a.block;
  const int8_t* q = a.q + i * p.k;
  const float* d = a.d + i * nb;
  const int16_t* s = a.sum16 + i * (p.k / 16);
  switch (p.type) {
    case QuantType::q8_0: return dot_q8_0(reinterpret_cast<const BlockQ8_0*>(w), q, d, s, nb);
    case QuantType::q4_0: return dot_q4(reinterpret_cast<const BlockQ4_0*>(w), q, d, s, nb);
    case QuantType::q4_1: return dot_q4(reinterpret_cast<const BlockQ4_1*>(w), q, d, s, nb);
    case QuantType::q4_k: return dot_k45(reinterpret_cast<const BlockQ4_K*>(w), q, d, s, nb);
    case QuantType::q5_k: return dot_k45(reinterpret_cast<const BlockQ5_K*>(w), q, d, s, nb);
    case QuantType::q6_k: return dot_q6_k(reinterpret_cast<const BlockQ6_K*>(w), q, d, s, nb);
    case QuantType::q5_0: return dot_q5(reinterpret_cast<const BlockQ5_0*>(w), q, d, s, nb);
    case QuantType::q5_1: return dot_q5(reinterpret_cast<const BlockQ5_1*>(w), q, d, s, nb);
  }
  return 0.f;
}

void rows_generic(const QuantProblem& p, const Q8Acts& a, int64_t n0, int64_t n1) {
  for (int64_t j = n0; j < n1; ++j)
    for (int64_t i = 0; i < p.m; ++i) p.y[i * p.ldy + j] = dot(p, a, j, i) + (p.bias ? p.bias[j] : 0.f);
}

void packed_generic(const PackedProblem& p, const Q8Acts& a, int64_t g0, int64_t g1) {
  const QuantPacked& w = *p.w;
  const int64_t nb = w.k() / 32;
  for (int64_t g = g0; g < g1; ++g)
    for (int l = 0; l < 16 && 16 * g + l < w.n(); ++l)
      for (int64_t i = 0; i < p.m; ++i) {
        float acc = 0.f;
        for (int64_t b = 0; b < nb; ++b) {
          for (int h = 0; h < 2; ++h) {  // q6_k scales elements 0..15 and 16..31 apart
            int s = 0;
            for (int t = 16 * h; t < 16 * h + 16; ++t) s += w.code(g, b, l, t) * a.q[i * w.k() + 32 * b + t];
            acc += w.scale(g, b, l, h) * a.d[i * nb + b] * static_cast<float>(s);
          }
          acc += w.min(g, b, l) * a.dsum[i * nb + b];
        }
        p.y[i * p.ldy + 16 * g + l] = acc + (p.bias ? p.bias[16 * g + l] : 0.f);
      }
}

}  // namespace

const QuantKernels kQuantKernelsGeneric = {rows_generic, packed_generic, "generic", nullptr};

}  // namespace fuselm::kernels
