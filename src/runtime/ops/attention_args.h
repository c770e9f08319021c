#pragma once
// Arguments of one sequence's attention step (see attention_op.cc); adapter to the kernel.
#include <cstdint>

namespace fuselm::runtime::ops {

struct AttentionArgs {
  const float* q = nullptr;  // new tokens' queries, [T][Hq][D] with the strides below
  int64_t q_token_stride = 0, q_head_stride = 0;
  const float* k_new = nullptr;
  int64_t k_token_stride = 0, k_head_stride = 0;
  const float* v_new = nullptr;
  int64_t v_token_stride = 0, v_head_stride = 0;
  float* k_cache = nullptr;  // [slots][Hkv*D]
  float* v_cache = nullptr;  // [slots][Hkv*Dv]
  const int32_t* slots = nullptr;  // slot of context positions 0..context_len-1
  int64_t context_len = 0, num_tokens = 0;
  int64_t num_q_heads = 0, num_kv_heads = 0, head_dim = 0, v_head_dim = 0;
  float scale = 1.f;
  int64_t sliding_window = -1;  // <= 0: none
  float softcap = 0.f;          // <= 0: none
  const float* sinks = nullptr; // [Hq] or null
  float* out = nullptr;         // [T][Hq][Dv] contiguous
};

void run_attention(const AttentionArgs& a);

}  // namespace fuselm::runtime::ops
