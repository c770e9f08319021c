#pragma once
// Per-ISA kernel table of attention (internal).
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/attention.h"

namespace fuselm::kernels {

struct AttentionKernels {
  /// New token i, q heads [h0, h0 + nh) of one KV group, context keys [lo, hi) (the cache already
  /// holds the new K/V; strides resolved): accumulates unnormalised p·V into o[r] (dv floats) with
  /// the running max m[r] and sum l[r] of head h0 + r, all initialised by the caller.
  void (*attend_group)(const AttentionArgs& a, int64_t i, int64_t h0, int64_t nh, int64_t lo,
                       int64_t hi, float* const* o, float* m, float* l);
  /// o[0, n) *= f
  void (*scale_row)(float* o, int64_t n, float f);
  /// attend_group over a bf16 cache (AttentionArgs::cache_bf16).
  void (*attend_group_bf16)(const AttentionArgs& a, int64_t i, int64_t h0, int64_t nh, int64_t lo,
                            int64_t hi, float* const* o, float* m, float* l);
  /// Prefill: new tokens [i0, i0 + nb), q heads [h0, h0 + nh) of one KV group, token b seeing
  /// the keys [lo[b], hi[b]): attend_group for each token, into o[b * nh + r], m[b * nh + r] and
  /// l[b * nh + r], with each chunk of keys transposed once for all nb tokens.
  void (*attend_block)(const AttentionArgs& a, int64_t i0, int64_t nb, int64_t h0, int64_t nh, const int64_t* lo,
                       const int64_t* hi, float* const* o, float* m, float* l);
  /// attend_block over a bf16 cache.
  void (*attend_block_bf16)(const AttentionArgs& a, int64_t i0, int64_t nb, int64_t h0, int64_t nh,
                            const int64_t* lo, const int64_t* hi, float* const* o, float* m, float* l);
  /// attend_group and attend_block over a q8_0 cache (AttentionArgs::cache_q8_0).
  void (*attend_group_q8_0)(const AttentionArgs& a, int64_t i, int64_t h0, int64_t nh, int64_t lo,
                            int64_t hi, float* const* o, float* m, float* l);
  void (*attend_block_q8_0)(const AttentionArgs& a, int64_t i0, int64_t nb, int64_t h0, int64_t nh,
                            const int64_t* lo, const int64_t* hi, float* const* o, float* m, float* l);
};

extern const AttentionKernels kAttentionKernelsGeneric;

}  // namespace fuselm::kernels
