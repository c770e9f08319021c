#include "kernels/cpu/attention.h"

#include <algorithm>
#include <vector>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#include "kernels/cpu/attention_impl.h"
#include "isa/attention_tables.inc"

namespace fuselm::kernels {

const AttentionKernels kAttentionKernelsGeneric = make_attention_kernels<Isa::generic>();

namespace {

const AttentionKernels& attention_kernels() {
  return isa_kernels<AttentionKernels>();
}

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("attention: " + what); }

constexpr int64_t kQ8Block = 32, kQ8BlockBytes = 34;  // ggml's block_q8_0
int64_t q8_blocks(int64_t head) { return (head + kQ8Block - 1) / kQ8Block; }

AttentionArgs resolve(const AttentionArgs& in) {
  AttentionArgs a = in;
  if (a.hq <= 0 || a.hkv <= 0 || a.dqk <= 0 || a.dv <= 0)
    fail(fmt::format("heads and head sizes must be positive (hq={} hkv={} dqk={} dv={})", a.hq,
                     a.hkv, a.dqk, a.dv));
  if (a.hq % a.hkv != 0) fail(fmt::format("hq {} is not a multiple of hkv {}", a.hq, a.hkv));
  if (a.t < 0 || a.t > a.ctx_len)
    fail(fmt::format("new tokens t={} must be within the context length {}", a.t, a.ctx_len));
  if (a.t == 0) return a;
  if (!a.q || !a.out || !a.k_cache || !a.v_cache || !a.slots) fail("null q, out, cache or slots");
  if ((a.k == nullptr) != (a.v == nullptr)) fail("k and v must both be given or both be null");
  if (a.num_slots <= 0) fail(fmt::format("num_slots {} must be positive", a.num_slots));
  if (a.q_head_stride == 0) a.q_head_stride = a.dqk;
  if (a.q_token_stride == 0) a.q_token_stride = a.hq * a.q_head_stride;
  if (a.k_head_stride == 0) a.k_head_stride = a.dqk;
  if (a.k_token_stride == 0) a.k_token_stride = a.hkv * a.k_head_stride;
  if (a.v_head_stride == 0) a.v_head_stride = a.dv;
  if (a.v_token_stride == 0) a.v_token_stride = a.hkv * a.v_head_stride;
  if (a.cache_bf16 && a.cache_q8_0) fail("the cache is bf16 or q8_0, not both");
  // A row's width in the stride's unit: values, or q8_0 blocks (each head padded to whole blocks).
  const int64_t k_width = a.hkv * (a.cache_q8_0 ? q8_blocks(a.dqk) : a.dqk);
  const int64_t v_width = a.hkv * (a.cache_q8_0 ? q8_blocks(a.dv) : a.dv);
  if (a.k_row_stride == 0) a.k_row_stride = k_width;
  if (a.v_row_stride == 0) a.v_row_stride = v_width;
  if (a.k_row_stride < k_width || a.v_row_stride < v_width)
    fail(fmt::format("cache row strides {}/{} are narrower than a row ({}/{})", a.k_row_stride, a.v_row_stride,
                     k_width, v_width));
  for (int64_t j = 0; j < a.ctx_len; ++j)
    if (a.slots[j] < 0 || a.slots[j] >= a.num_slots)
      fail(fmt::format("slot {} of context position {} is outside [0, {})", a.slots[j], j,
                       a.num_slots));
  return a;
}

void copy_row(float* dst, const float* src, int64_t n) {
  if (dst != src) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// Writes the new K (V) of KV head `h`, `src` (n values), into the row of `slot` (row_stride
// apart): as is into an f32 cache, rounded to nearest even into a bf16 one, quantized per block
// (the head padded with zeros to whole blocks) into a q8_0 one.
void store_row(const AttentionArgs& a, void* cache, int64_t slot, int64_t row_stride, int64_t h, const float* src,
               int64_t n) {
  if (a.cache_q8_0) {
    const int64_t nb = q8_blocks(n);
    uint8_t* dst = static_cast<uint8_t*>(cache) + (slot * row_stride + h * nb) * kQ8BlockBytes;
    const int64_t whole = n / kQ8Block * kQ8Block;
    if (whole > 0) quantize_row(QuantType::q8_0, src, dst, whole);
    if (whole == n) return;
    float pad[kQ8Block] = {};
    std::copy(src + whole, src + n, pad);
    return quantize_row(QuantType::q8_0, pad, dst + (nb - 1) * kQ8BlockBytes, kQ8Block);
  }
  const int64_t at = slot * row_stride + h * n;
  if (!a.cache_bf16) return copy_row(static_cast<float*>(cache) + at, src, n);
  uint16_t* dst = static_cast<uint16_t*>(cache) + at;
  for (int64_t e = 0; e < n; ++e) dst[e] = f32_to_bf16(src[e]);
}

// The first key position that the query at `pos` attends to under the sliding window and the
// chunked mask (keys [first_key, pos] are visible).
int64_t first_key(const AttentionArgs& a, int64_t pos) {
  const int64_t window = a.sliding_window > 0 ? std::max<int64_t>(0, pos - a.sliding_window + 1) : int64_t{0};
  return a.chunk_size > 0 ? std::max(window, pos / a.chunk_size * a.chunk_size) : window;
}

using GroupFn = decltype(AttentionKernels::attend_group);
GroupFn group_kernel(const AttentionKernels& k, const AttentionArgs& a) {
  return a.cache_q8_0 ? k.attend_group_q8_0 : a.cache_bf16 ? k.attend_group_bf16 : k.attend_group;
}

// Prefill tokens per work item of attend_blocks: each 64-key chunk is transposed once for them.
constexpr int64_t kBlockTokens = 8;

// Work item (block of new tokens [i0, i0 + kBlockTokens) ∩ [0, t), KV group g) of a prefill
// or of a serving batch's sequence, K/V already in the cache: attend_block over the group's q
// heads (in slices of 64), then each row normalised.
void attend_block_item(const AttentionKernels& kern, const AttentionArgs& a, int64_t i0, int64_t g) {
  constexpr int64_t kMaxGroup = 64;
  float* o[kBlockTokens * kMaxGroup];
  float m[kBlockTokens * kMaxGroup], l[kBlockTokens * kMaxGroup];
  int64_t lo[kBlockTokens], hi[kBlockTokens];
  const auto attend = a.cache_q8_0 ? kern.attend_block_q8_0 : a.cache_bf16 ? kern.attend_block_bf16 : kern.attend_block;
  const int64_t group = a.hq / a.hkv, first = a.ctx_len - a.t, nb = std::min(kBlockTokens, a.t - i0);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < nb; ++b) {
    lo[b] = first_key(a, first + i0 + b);
    hi[b] = first + i0 + b + 1;
  }
  for (int64_t h0 = 0; h0 < group; h0 += kMaxGroup) {  // (groups wider than 64: in slices)
    const int64_t nh = std::min(kMaxGroup, group - h0);
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t r = 0; r < nh; ++r) {
        const int64_t h = g * group + h0 + r, x = b * nh + r;
        o[x] = a.out + ((i0 + b) * a.hq + h) * a.dv;
        std::fill(o[x], o[x] + a.dv, 0.f);
        m[x] = a.sinks ? a.sinks[h] : neg_inf;
        l[x] = a.sinks ? 1.f : 0.f;
      }
    attend(a, i0, nb, g * group + h0, nh, lo, hi, o, m, l);
    for (int64_t x = 0; x < nb * nh; ++x) kern.scale_row(o[x], a.dv, 1.f / l[x]);
  }
}

int64_t token_blocks(int64_t t) { return (t + kBlockTokens - 1) / kBlockTokens; }

// attention()'s work for a prefill (one key segment): items of (token block, KV group), latest
// blocks (most keys) first.
void attend_blocks(const AttentionKernels& kern, const AttentionArgs& a, int nt) {
  const int64_t items = token_blocks(a.t) * a.hkv;
  parallel_for_dynamic(nt, items, [&](int64_t rev) {
    const int64_t it = items - 1 - rev;
    attend_block_item(kern, a, it / a.hkv * kBlockTokens, it % a.hkv);
  });
}

}  // namespace

void attention(const AttentionArgs& args) {
  const AttentionArgs a = resolve(args);
  if (a.t == 0) return;
  const AttentionKernels& kern = attention_kernels();
  const GroupFn attend = group_kernel(kern, a);
  const int64_t group = a.hq / a.hkv, dv = a.dv;
  const int64_t first = a.ctx_len - a.t;  // position of new token 0
  auto key_lo = [&](int64_t pos) { return first_key(a, pos); };

  // work: keys visited · (dqk + dv) over all (token, head) pairs
  int64_t keys_total = 0, keys_max = 0;
  for (int64_t i = 0; i < a.t; ++i) {
    const int64_t keys = first + i + 1 - key_lo(first + i);
    keys_total += keys;
    keys_max = std::max(keys_max, keys);
  }
  const int nt = kernel_threads(keys_total * a.hq * (a.dqk + a.dv), int64_t{1} << 15);

  // Work items: (token, KV group, key segment). Decode of few groups over a long context splits
  // the keys into segments (merged afterwards, flash-decoding style) so that every thread works.
  constexpr int64_t kMinSegmentKeys = 128;
  int64_t segments = 1;
  if (nt > 1 && a.t * a.hkv < 4 * nt)
    segments = std::clamp<int64_t>((4 * nt + a.t * a.hkv - 1) / (a.t * a.hkv), 1,
                                   std::max<int64_t>(1, keys_max / kMinSegmentKeys));
  const int64_t items = a.t * a.hkv * segments;
  // partial results of segmented items: per (item, head of group) dv sums, then max and sum
  const int64_t part_row = dv + 2;
  float* part = segments > 1 ? thread_scratch(3, static_cast<size_t>(items * group * part_row))
                             : nullptr;

  const int64_t writes = a.k ? a.t * a.hkv : 0;
  const int64_t k_row = a.k_row_stride, v_row = a.v_row_stride;
  const float neg_inf = -std::numeric_limits<float>::infinity();

  // Every new K/V row into the cache before any token reads it (a task of its own: the join
  // orders it before the reads).
  const int nt_writes = kernel_threads(writes * (a.dqk + a.dv), int64_t{1} << 14);
  parallel_for_ranges(nt_writes, writes, 1, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t i = w / a.hkv, h = w % a.hkv;
      const int64_t slot = a.slots[first + i];
      store_row(a, a.k_cache, slot, k_row, h, a.k + i * a.k_token_stride + h * a.k_head_stride, a.dqk);
      store_row(a, a.v_cache, slot, v_row, h, a.v + i * a.v_token_stride + h * a.v_head_stride, a.dv);
    }
  });

  if (segments == 1 && a.t > 1 && (nt == 1 || token_blocks(a.t) * a.hkv >= 4 * nt)) return attend_blocks(kern, a, nt);

  parallel_for_dynamic(nt, items, [&](int64_t rev) {
    constexpr int64_t kMaxGroup = 64;
    float* o[kMaxGroup];
    float m[kMaxGroup], l[kMaxGroup];
    const int64_t it = items - 1 - rev;  // latest tokens (most keys) first
    const int64_t i = it / (a.hkv * segments), g = it / segments % a.hkv, sg = it % segments;
    const int64_t pos = first + i, lo = key_lo(pos), keys = pos + 1 - lo;
    const int64_t s_lo = lo + keys * sg / segments, s_hi = lo + keys * (sg + 1) / segments;
    for (int64_t h0 = 0; h0 < group; h0 += kMaxGroup) {  // (groups wider than 64: in slices)
      const int64_t nh = std::min(kMaxGroup, group - h0);
      for (int64_t r = 0; r < nh; ++r) {
        const int64_t h = g * group + h0 + r;
        o[r] = part ? part + (it * group + h0 + r) * part_row : a.out + (i * a.hq + h) * dv;
        std::fill(o[r], o[r] + dv, 0.f);
        const bool sink = a.sinks && sg == 0;
        m[r] = sink ? a.sinks[h] : neg_inf;
        l[r] = sink ? 1.f : 0.f;
      }
      attend(a, i, g * group + h0, nh, s_lo, s_hi, o, m, l);
      for (int64_t r = 0; r < nh; ++r) {
        if (part) {
          o[r][dv] = m[r];
          o[r][dv + 1] = l[r];
        } else {
          kern.scale_row(o[r], dv, 1.f / l[r]);
        }
      }
    }
  });

  if (!part) return;
  // merge the segments of each (token, head)
  const int nt_merge = kernel_threads(a.t * a.hq * segments * dv, int64_t{1} << 13);
  parallel_for_ranges(nt_merge, a.t * a.hq, 1, [&](int64_t th0, int64_t th1) {
    for (int64_t th = th0; th < th1; ++th) {
      const int64_t i = th / a.hq, h = th % a.hq, g = h / group, r = h % group;
      auto row = [&](int64_t sg) { return part + (((i * a.hkv + g) * segments + sg) * group + r) * part_row; };
      float mx = neg_inf;
      for (int64_t sg = 0; sg < segments; ++sg) mx = std::max(mx, row(sg)[dv]);
      float* out = a.out + th * dv;
      std::fill(out, out + dv, 0.f);
      float sum = 0.f;
      for (int64_t sg = 0; sg < segments; ++sg) {
        const float* pr = row(sg);
        if (pr[dv + 1] == 0.f) continue;  // an empty segment
        const float wgt = std::exp(pr[dv] - mx);
        sum += pr[dv + 1] * wgt;
        for (int64_t d = 0; d < dv; ++d) out[d] += wgt * pr[d];
      }
      kern.scale_row(out, dv, 1.f / sum);
    }
  });
}

void attention_batch(std::span<const AttentionArgs> batch) {
  thread_local std::vector<AttentionArgs> seqs;
  thread_local std::vector<int64_t> first_item;  // per sequence: its first work item
  seqs.clear();
  first_item.clear();
  int64_t items = 0, work = 0;
  for (const auto& in : batch) {
    AttentionArgs a = resolve(in);
    if (a.t == 0) continue;
    if (!seqs.empty() && (a.hq != seqs[0].hq || a.hkv != seqs[0].hkv || a.dqk != seqs[0].dqk || a.dv != seqs[0].dv ||
                          a.cache_bf16 != seqs[0].cache_bf16 || a.cache_q8_0 != seqs[0].cache_q8_0))
      fail("the sequences of a batch have different head layouts or cache dtypes");
    first_item.push_back(items);
    items += token_blocks(a.t) * a.hkv;
    work += (a.ctx_len - a.t / 2) * a.t * a.hq * (a.dqk + a.dv);  // about: keys visited per token
    seqs.push_back(a);
  }
  if (seqs.empty()) return;
  const int nt = kernel_threads(work, int64_t{1} << 15);
  if (seqs.size() == 1 || items < 4 * nt) {  // few items: attention() splits keys into segments
    for (const auto& a : seqs) attention(a);
    return;
  }
  const AttentionKernels& kern = attention_kernels();
  const int64_t hkv = seqs[0].hkv;
  // Plain locals for the tasks: a thread_local named inside them would be each thread's own.
  const AttentionArgs* const seq = seqs.data();
  const int64_t* const first = first_item.data();
  const int64_t n_seq = static_cast<int64_t>(seqs.size());
  auto sequence_of = [&](int64_t it) { return std::upper_bound(first, first + n_seq, it) - first - 1; };

  int64_t writes = 0;  // every new K/V row into the cache first: (sequence, token, KV head)
  thread_local std::vector<int64_t> first_write;
  first_write.clear();
  for (const AttentionArgs& a : seqs) {
    first_write.push_back(writes);
    writes += a.k ? a.t * hkv : 0;
  }
  const int64_t* const first_w = first_write.data();
  const int nt_writes = kernel_threads(writes * (seq[0].dqk + seq[0].dv), int64_t{1} << 14);
  parallel_for_ranges(nt_writes, writes, 1, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t sq = std::upper_bound(first_w, first_w + n_seq, w) - first_w - 1;
      const AttentionArgs& a = seq[sq];
      const int64_t r = w - first_w[sq], i = r / hkv, h = r % hkv;
      const int64_t slot = a.slots[a.ctx_len - a.t + i];
      store_row(a, a.k_cache, slot, a.k_row_stride, h, a.k + i * a.k_token_stride + h * a.k_head_stride, a.dqk);
      store_row(a, a.v_cache, slot, a.v_row_stride, h, a.v + i * a.v_token_stride + h * a.v_head_stride, a.dv);
    }
  });

  parallel_for_dynamic(nt, items, [&](int64_t rev) {  // (sequence, token block, KV group)
    const int64_t it = items - 1 - rev;
    const int64_t sq = sequence_of(it), w = it - first[sq];
    attend_block_item(kern, seq[sq], w / hkv * kBlockTokens, w % hkv);
  });
}

}  // namespace fuselm::kernels
