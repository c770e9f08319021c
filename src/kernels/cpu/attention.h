#pragma once
// attention: causal softmax attention of a sequence's new tokens over an engine-owned KV cache
// that is paged by slot (one layer).
//
// KV cache (fp32, bf16 with cache_bf16, or q8_0 with cache_q8_0; owned by the engine):
//   k_cache [num_slots][hkv * dqk]    row of a slot: its K for every KV head, head-major
//   v_cache [num_slots][hkv * dv]   (rows k_row_stride / v_row_stride apart when those are set)
//   slots[j], j < ctx_len: the slot holding context position j (the caller's block table, flattened)
// New tokens: the last t positions of the context (new token i has position p = ctx_len - t + i):
//   q   [t, hq, dqk]   element (i, h, d) at q[i*q_token_stride + h*q_head_stride + d]
//   k   [t, hkv, dqk]  likewise with k_*_stride; nullptr: their K/V are already in the cache
//   v   [t, hkv, dv]   likewise with v_*_stride; k and v are both given or both null
//   out [t, hq, dv]    contiguous fp32; must not overlap q, k, v or the cache
// A stride of 0 means dense (head stride = head size, token stride = heads · head size).
//
// The kernel (a) writes k/v of the new tokens to k_cache/v_cache at slots[ctx_len - t + i], then
// (b) for each new token i and q head h (kv head h / (hq / hkv): GQA, MQA), with p its position:
//   s_j  = scale · q·k_j                               for keys j = 0 .. ctx_len-1
//   s_j  = softcap · tanh(s_j / softcap)               if softcap > 0 (after scaling, before masking)
//   s_j += alibi_slopes[h] · (j - p)                   if alibi_slopes (ALiBi: after the softcap,
//          as the bias is added to the capped scores; softmax per query makes it equal to
//          slopes[h] · j, the form bloom and falcon add, since -slopes[h] · p is one constant a row;
//          with sinks, whose logit has no bias, it is the distance form that is added)
//   keep j <= p (causal) and, if sliding_window W > 0, j > p - W (itself and W-1 before), and if
//   chunk_size C > 0, j >= (p / C) · C (keys of its own chunk only)
//   out  = sum_j softmax_j(s) · v_j, where with sinks the softmax has one more logit, sinks[h]
//          (unscaled, not softcapped), in its denominator only
// which is transformers' eager_attention_forward (gemma2: scaling, softcap; gpt_oss: sinks; sliding
// window masks) for one sequence. Online softmax in fp32. Threads take (token, KV group) items, a
// group's q heads together so that K/V rows are read once per group; a decode step over a long
// context also splits the keys into segments whose partial softmax sums are merged at the end.
// Throws std::invalid_argument on inconsistent arguments (and slots outside [0, num_slots)).
#include <cstdint>
#include <span>

namespace fuselm::kernels {

struct AttentionArgs {
  // Rows of float, or of bf16 (uint16_t) when cache_bf16: new K/V are rounded to nearest even when
  // written and widened to fp32 when read; the arithmetic is fp32 either way.
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  bool cache_bf16 = false;
  // q8_0 rows (ggml's block_q8_0: fp16 scale d, 32 int8 q, x = d·q; 34 bytes per 32 values): each
  // head of a row is ceil(head size / 32) blocks, padded with zeros. New K/V are quantized per
  // block when written (ggml's quantize_row_q8_0_ref); the kernels read a block's int8 values
  // times its scale as they need them. Row strides then count blocks (default hkv·ceil(dqk/32) and
  // hkv·ceil(dv/32)). Not with cache_bf16.
  bool cache_q8_0 = false;
  int64_t num_slots = 0;  // rows of each cache; every slot is checked against it
  const int32_t* slots = nullptr;
  int64_t ctx_len = 0;

  int64_t t = 0;
  const float* q = nullptr;
  int64_t q_token_stride = 0, q_head_stride = 0;
  const float* k = nullptr;
  int64_t k_token_stride = 0, k_head_stride = 0;
  const float* v = nullptr;
  int64_t v_token_stride = 0, v_head_stride = 0;
  float* out = nullptr;

  int64_t hq = 0, hkv = 0, dqk = 0, dv = 0;
  // Floats (bf16 values, q8_0 blocks) between consecutive slots' rows; 0: hkv·dqk (K), hkv·dv (V). MLA's latent cache reads
  // V as the first dv floats of the K row (v_cache = k_cache, v_row_stride = k_row_stride).
  int64_t k_row_stride = 0, v_row_stride = 0;
  float scale = 1.f;
  int64_t sliding_window = 0;    // <= 0: none
  int64_t chunk_size = 0;        // <= 0: none; else keys j with j / C == p / C only (chunked masks)
  float softcap = 0.f;           // <= 0: none
  const float* sinks = nullptr;  // [hq] or nullptr
  const float* alibi_slopes = nullptr;  // [hq] or nullptr: a linear bias slope · (key - query position)
};

void attention(const AttentionArgs& args);

/// The attention of several sequences of one layer (the batch of a serving step), each as
/// attention() computes it, in one parallel region: a decode step of many short sequences is one
/// work list of (sequence, token, KV group) items instead of a thread team per sequence. Falls back
/// to attention() per sequence when the items are too few to keep every thread busy (then key
/// segments split the work). Throws as attention() does.
void attention_batch(std::span<const AttentionArgs> batch);

}  // namespace fuselm::kernels
