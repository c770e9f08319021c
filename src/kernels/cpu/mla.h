#pragma once
// mla_attention: multi-head latent attention of one sequence over its latent cache rows
// (the fuselm.mla_attention op, src/runtime/ops/mla_op.cc; docs/mla.md has the algebra).
//
//   q       fp32, head h's token i at q + h·q_head_stride + i·(Dn+Dr)   [q_nope | q_rot]
//   cache   fp32 rows [latent (R) | k_rot (Dr)], row s at cache + s·(R+Dr); slots[ctx] of the
//           sequence, the new tokens' rows already written
//   w_up    [H·(Dn+Dv), R] in w_dtype: per head h rows [h·(Dn+Dv), +Dn) = W_k, the next Dv = W_v
//   out     fp32 [t, H, Dv], token i head h at out + (i·H + h)·Dv
//   scratch fp32, mla_scratch_floats(a) floats
// Per sequence the cheaper exact form runs: absorbed (q' = [q_nope·W_k | q_rot] against the rows,
// out = W_v · Σ p·row[:R]) or, for long prefill chunks, expanded (K/V of the context from the
// rows by one GEMM per group of heads, then ordinary attention).
#include <cstdint>

#include "kernels/cpu/dtype.h"

namespace fuselm::kernels {

struct MlaArgs {
  const float* q = nullptr;
  int64_t q_head_stride = 0;
  const float* cache = nullptr;
  int64_t num_slots = 0;
  const int32_t* slots = nullptr;
  int64_t ctx = 0, t = 0;  // context length (new tokens included) and new tokens
  const void* w_up = nullptr;
  DType w_dtype = DType::f32;
  int64_t H = 0, R = 0, Dr = 0, Dn = 0, Dv = 0;
  float scale = 1.0f;
  float* out = nullptr;
  float* scratch = nullptr;
};

/// Whether the expanded form is cheaper: t·(2R+Dr−Dn−Dr−Dv) > (Dn+Dv)·R (and t > 1).
bool mla_expands(const MlaArgs& a);
/// Scratch floats mla_attention needs for a.
int64_t mla_scratch_floats(const MlaArgs& a);
void mla_attention(const MlaArgs& a);

/// Writes the latent rows of t new tokens into their cache slots: row i = [lat + i·R (R floats) |
/// rot + i·Dr (Dr floats)] goes to slot slots[i], into `cache` (fp32 rows of R+Dr) or, when it is
/// null, rounded to nearest even into `cache_bf16`. Slots must be in range (the op checks them).
void mla_write_latent(const float* lat, const float* rot, int64_t t, int64_t R, int64_t Dr, const int32_t* slots,
                      float* cache, uint16_t* cache_bf16);
/// Widens the bf16 cache rows of slots[0..n) (Dl values each) into dense fp32 rows out[j·Dl, +Dl).
void mla_widen_rows(const uint16_t* cache_bf16, const int32_t* slots, int64_t n, int64_t Dl, float* out);

}  // namespace fuselm::kernels
