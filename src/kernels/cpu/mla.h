#pragma once
// mla_attention: multi-head latent attention of one sequence over its latent cache rows
// (the fuselm.mla_attention op, src/runtime/ops/mla_op.cc; docs/mla.md has the algebra).
//
//   q       fp32, head h's token i at q + h·q_head_stride + i·(Dn+Dr)   [q_nope | q_rot]
//   cache   rows [latent (R) | k_rot (Dr)] in cache_type, one per slot; slots[ctx] of the
//           sequence, the new tokens' rows already written (mla_write_latent):
//             f32, bf16  R + Dr values, row s at value s·(R+Dr)
//             q8_0       mla_q8_row_blocks(R, Dr) of ggml's block_q8_0 (fp16 scale, 32 int8; 34
//                        bytes): ceil(R/32) blocks of the latent, then ceil(Dr/32) of the rope
//                        key, each part padded with zeros (512 + 64: 18 blocks, 612 bytes)
//   w_up    [H·(Dn+Dv), R] in w_dtype: per head h rows [h·(Dn+Dv), +Dn) = W_k, the next Dv = W_v
//   out     fp32 [t, H, Dv], token i head h at out + (i·H + h)·Dv
//   scratch fp32, mla_scratch_floats(a) floats
// Per sequence the cheaper exact form runs: absorbed (q' = [q_nope·W_k | q_rot] against the rows,
// out = W_v · Σ p·row[:R]) or, for long prefill chunks, expanded (K/V of the context from the
// rows by one GEMM per group of heads, then ordinary attention). The absorbed form reads the rows
// in place with the attention kernels of every ISA path (bf16 widened and q8_0 blocks scaled per
// vector load; for q8_0, q' gets zeros where the latent's last block is padded, so the row reads
// as one head of ceil(R/32)·32 + Dr values); the expanded form converts the context's rows into
// the fp32 GEMM input that it gathers for every dtype.
#include <cstdint>

#include "kernels/cpu/dtype.h"

namespace fuselm::kernels {

/// How the latent cache stores its rows (the layout above).
enum class MlaCacheType : uint8_t { f32, bf16, q8_0 };

/// q8_0 blocks of one latent row: ceil(R/32) + ceil(Dr/32).
int64_t mla_q8_row_blocks(int64_t R, int64_t Dr);

struct MlaArgs {
  const float* q = nullptr;
  int64_t q_head_stride = 0;
  const void* cache = nullptr;
  MlaCacheType cache_type = MlaCacheType::f32;
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
/// rot + i·Dr (Dr floats)] goes to slot slots[i] of `cache`, a cache of `type` in the layout above:
/// as is (f32), rounded to nearest even (bf16), or each part quantized per block as ggml's
/// quantize_row_q8_0_ref, zero-padded to whole blocks (q8_0). Slots must be in range (the op
/// checks them).
void mla_write_latent(const float* lat, const float* rot, int64_t t, int64_t R, int64_t Dr, const int32_t* slots,
                      void* cache, MlaCacheType type);

}  // namespace fuselm::kernels
