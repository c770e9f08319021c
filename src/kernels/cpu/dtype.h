#pragma once
// Storage dtypes of weights, and conversions to and from fp32.
//
// Activations are always fp32; weights may be fp32, bf16 or fp16 (the storage dtypes: the engine's
// one DType of base/dtype.h, restricted to those three). bf16 and fp16 values are held as
// raw uint16_t bit patterns (as they lie in a safetensors/GGUF file), so the helpers take and return
// uint16_t. Conversions to fp32 are exact; conversions from fp32 round to nearest, ties to even,
// keep infinities and NaNs (NaN stays NaN, quieted), and produce fp16 subnormals where due.
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>

#include "base/dtype.h"

namespace fuselm::kernels {

using fuselm::DType;
using fuselm::dtype_name;
using fuselm::dtype_size;

/// `d` when a kernel reads weights in it (f32, bf16, f16: the storage dtypes); nullopt otherwise.
constexpr std::optional<DType> storage_dtype(DType d) {
  if (d == DType::f32 || d == DType::bf16 || d == DType::f16) return d;
  return std::nullopt;
}

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (overflow rounds to inf, as due)
  return static_cast<uint16_t>(u >> 16);
}

// fp16 <-> fp32 after Marat Dukhan's FP16 library (bit-exact, no FPU mode assumptions except
// round-to-nearest and no flush-to-zero, which is how the engine runs).
inline float f16_to_f32(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xe0u << 23;
  const float normalized = std::bit_cast<float>((two_w >> 4) + exp_offset) * 0x1.0p-112f;
  const uint32_t magic_mask = 126u << 23;
  const float denormalized = std::bit_cast<float>((two_w >> 17) | magic_mask) - 0.5f;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t bits = two_w < denormalized_cutoff ? std::bit_cast<uint32_t>(denormalized)
                                                    : std::bit_cast<uint32_t>(normalized);
  return std::bit_cast<float>(sign | bits);
}

inline uint16_t f32_to_f16(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = ((f < 0 ? -f : f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = std::bit_cast<uint32_t>(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007c00u;
  const uint32_t mantissa_bits = bits & 0x00000fffu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

/// Element i of a buffer of dtype `d`, as fp32.
inline float load_as_f32(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return 0.f;
  }
}

/// dst[i] = convert(src[i]) for i < n, any pair of dtypes (same dtype: a copy). Buffers must not
/// overlap. Both must be storage dtypes (storage_dtype). Parallel (OpenMP) for large n.
void convert_dtype(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);

}  // namespace fuselm::kernels
