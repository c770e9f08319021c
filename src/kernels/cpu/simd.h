#pragma once
// A thin SIMD vocabulary, Vec<Isa>, in which kernel bodies are written once (internal).
//
// Vec<Isa::generic> is scalar C++ (one lane). Vec<Isa::avx2> (8 lanes) and Vec<Isa::avx512>
// (16 lanes) live in simd_avx2.h / simd_avx512.h and may only be included inside the target region
// of a file CMake writes per level (isa_table.cc.in), which compiles the enclosed functions for it.
//
// ODR rule for ISA code: everything compiled for an ISA is in an anonymous namespace (so no inline
// function is ever shared between a generic and an AVX translation unit), and every header with
// external linkage (std, fmt, our public headers) is included *before* the region. Only the
// per-level kernel tables (kLinearKernels_avx512, ...) have external linkage.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa.h"

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FUSELM_X86_ISAS 1
#else
#define FUSELM_X86_ISAS 0
#endif

#define FUSELM_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define FUSELM_UNROLL(n) FUSELM_PRAGMA(unroll n)
#elif defined(__GNUC__)
#define FUSELM_UNROLL(n) FUSELM_PRAGMA(GCC unroll n)
#else
#define FUSELM_UNROLL(n)
#endif
#define FUSELM_INLINE inline __attribute__((always_inline))

// Prefetch the cache line at p into L2 (a hint: any address is allowed, none faults). The bf16
// GEMVs use it for the next block of W rows: their rows are short (1152 bytes at k = 576), and
// the hardware streamers, which ramp up per stream, leave such streams at 60-70 % of the
// bandwidth on an Intel Xeon (bench_kernels: 62-69 % without, 74-92 % with).
#define FUSELM_PREFETCH_L2(p) __builtin_prefetch((p), 0, 2)

namespace fuselm::kernels {
namespace {  // NOLINT: see the ODR rule above

template <Isa I>
struct Vec;

template <>
struct Vec<Isa::generic> {
  using R = float;
  using M = bool;
  static constexpr int W = 1;
  static constexpr Isa isa = Isa::generic;

  static R zero() { return 0.f; }
  static R set1(float a) { return a; }
  static R load(const float* p) { return *p; }
  static R loadn(const float* p, int n) { return n > 0 ? *p : 0.f; }
  static void store(float* p, R v) { *p = v; }
  static void storen(float* p, R v, int n) {
    if (n > 0) *p = v;
  }
  static R load_bf16(const uint16_t* p) { return bf16_to_f32(*p); }
  static R loadn_bf16(const uint16_t* p, int n) { return n > 0 ? bf16_to_f32(*p) : 0.f; }
  static R load_f16(const uint16_t* p) { return f16_to_f32(*p); }
  static R loadn_f16(const uint16_t* p, int n) { return n > 0 ? f16_to_f32(*p) : 0.f; }
  // W int8 values as fp32 (the q8_0 KV cache)
  static R load_i8(const int8_t* p) { return static_cast<float>(*p); }

  // 2·W bf16 values: even = elements 0, 2, 4, ..., odd = elements 1, 3, 5, ... (as fp32)
  static void load_bf16_pairs(const uint16_t* p, R& even, R& odd) {
    even = bf16_to_f32(p[0]);
    odd = bf16_to_f32(p[1]);
  }
  static R add(R a, R b) { return a + b; }
  static R sub(R a, R b) { return a - b; }
  static R mul(R a, R b) { return a * b; }
  static R div(R a, R b) { return a / b; }
  static R fma(R a, R b, R c) { return a * b + c; }  // a*b + c (no FMA unit assumed)
  static R max(R a, R b) { return a > b ? a : b; }
  static R min(R a, R b) { return a < b ? a : b; }
  static R abs(R a) { return std::fabs(a); }
  static R neg(R a) { return -a; }
  static R sqrt(R a) { return std::sqrt(a); }
  static float hsum(R a) { return a; }
  static float hmax(R a) { return a; }
  static M lt(R a, R b) { return a < b; }
  static R select(M m, R a, R b) { return m ? a : b; }  // m ? a : b
  static R exp(R a) { return std::exp(a); }
  static R sum_rows(const R (&r)[W]) { return r[0]; }  // lane i: the sum of r[i]'s lanes
  static void transpose(R (&)[W]) {}
};

}  // namespace
}  // namespace fuselm::kernels
