// fuselm.attention(q [1,Hq,T,Dqk], k [1,Hkv,T,Dqk], v [1,Hkv,T,Dv], sinks?, scaling,
// sliding_window, softcap, layer_idx, chunk_size, mask, alibi_slopes?, key_select?) -> [1, T, Hq, Dv]. The only op that knows
// sequences: it writes each sequence's new K/V into its KV slots and attends over the sequence's
// context. mask is the layer's mask kind read at capture (docs/ir.md): causal, sliding or chunked
// run; any other kind (bidirectional, unknown) is refused, never run as causal attention.
// alibi_slopes: Hq reals, the ALiBi bias slope[h] · (key - query position) on the scores (capture
// proves a bias of that form on probes: python/fuselm_capture/attn_by_hand.py); none: no bias.
// key_select: always none here. Capture proves a sparse attention's top-k key selection to be every
// key within the model's context and removes it (python/fuselm_capture/key_selection.py); ir::load
// refuses an IR that still carries one (OpDef::none_in_ir), so it is never run over every key.
#include <fmt/core.h>

#include <string_view>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kv/paged_kv_cache.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

/// The mask kinds the kernel runs (kernels/cpu/attention.h); fails naming the kind otherwise.
void check_mask(const OpCall& c) {
  const Value& m = c.arg("mask");
  if (m.kind != Value::Kind::string || !m.s) c.fail("the mask kind is not a string");
  const std::string_view kind = m.s;
  if (kind != "causal" && kind != "sliding" && kind != "chunked")
    c.fail(fmt::format("layer {}: its mask is '{}', which the engine cannot express (it runs causal, sliding-window "
                       "and chunked masks)",
                       c.integer("layer_idx"), kind));
}

/// The per-head ALiBi slopes (empty without them); fails unless they are Hq reals.
std::vector<float> alibi_slopes(const OpCall& c, int64_t hq) {
  std::vector<float> out;
  if (!c.has("alibi_slopes")) return out;
  const Value& v = c.arg("alibi_slopes");
  if (v.kind != Value::Kind::list || static_cast<int64_t>(v.list.size()) != hq)
    c.fail(fmt::format("alibi_slopes must be a list of {} reals, one per query head", hq));
  for (const Value& e : v.list) out.push_back(static_cast<float>(e.as_double()));
  return out;
}

void attention(OpCall& c) {
  check_mask(c);
  const Tensor& q = c.tensor("q");
  const Tensor& k = c.tensor("k");
  const Tensor& v = c.tensor("v");
  if (q.ndim != 4 || k.ndim != 4 || v.ndim != 4 || q.shape[0] != 1)
    c.fail("expected q, k, v of shape [1, heads, tokens, head_dim], got " + q.describe());
  const int64_t Hq = q.shape[1], T = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], Dv = v.shape[3];
  if (k.shape[3] != D || v.shape[1] != Hkv || k.shape[2] != T || v.shape[2] != T || Hq % Hkv != 0)
    c.fail("q " + q.describe() + ", k " + k.describe() + ", v " + v.describe() + " do not form attention");
  const Batch& batch = c.ctx.batch();
  if (!batch.kv) c.fail("no KV cache was given to the executor");
  const int64_t layer = c.integer("layer_idx");
  if (layer < 0 || layer >= batch.kv->num_layers()) c.fail("layer index " + std::to_string(layer) + " has no KV cache");
  const auto& ls = batch.kv->layer_shape(static_cast<int>(layer));
  if (ls.k_width != Hkv * D || ls.v_width != Hkv * Dv) c.fail("KV cache row width does not match k/v head sizes");

  Scratch ss(c.ctx), sk(c.ctx), sv(c.ctx), ssink(c.ctx);
  // The kernel reads a head's row with unit stride and takes a zero stride to mean dense: other
  // views (a transposed head dim, a KV head broadcast by expand) are copied first.
  auto as_rows = [](const Tensor& t, Scratch& s) {
    const bool direct = t.dtype == DType::f32 && t.strides[3] == 1 && t.strides[1] != 0 && t.strides[2] != 0;
    return direct ? t : contiguous_as(t, DType::f32, s);
  };
  Tensor qf = as_rows(q, ss), kf = as_rows(k, sk), vf = as_rows(v, sv);
  const float* sinks = c.has("sinks") ? contiguous_as(c.tensor("sinks"), DType::f32, ssink).ptr<float>() : nullptr;
  const std::vector<float> slopes = alibi_slopes(c, Hq);
  Tensor out = c.alloc(DType::f32, {1, T, Hq, Dv});

  // One work list over all sequences (kernels::attention_batch): a decode step of many sequences
  // is one parallel region per layer, not one per sequence.
  thread_local std::vector<kernels::AttentionArgs> args;
  const bool bf16 = batch.kv->dtype() == kv::KvDType::bf16, q8 = batch.kv->dtype() == kv::KvDType::q8_0;
  const int li = static_cast<int>(layer);
  void* k_cache = q8 ? batch.kv->k_q8_0(li) : bf16 ? static_cast<void*>(batch.kv->k_bf16(li)) : batch.kv->k(li);
  void* v_cache = q8 ? batch.kv->v_q8_0(li) : bf16 ? static_cast<void*>(batch.kv->v_bf16(li)) : batch.kv->v(li);
  args.clear();
  int64_t covered = 0;
  for (const auto& s : batch.sequences) {
    if (s.first_token + s.num_tokens > T) c.fail("batch layout does not match the token count");
    kernels::AttentionArgs a;
    a.cache_bf16 = bf16;
    a.cache_q8_0 = q8;
    a.k_cache = k_cache;
    a.v_cache = v_cache;
    a.num_slots = batch.kv->num_slots();
    a.slots = s.slots;
    a.ctx_len = s.context_len;
    a.t = s.num_tokens;
    a.q = qf.ptr<float>() + s.first_token * qf.strides[2];
    a.q_token_stride = qf.strides[2];
    a.q_head_stride = qf.strides[1];
    a.k = kf.ptr<float>() + s.first_token * kf.strides[2];
    a.k_token_stride = kf.strides[2];
    a.k_head_stride = kf.strides[1];
    a.v = vf.ptr<float>() + s.first_token * vf.strides[2];
    a.v_token_stride = vf.strides[2];
    a.v_head_stride = vf.strides[1];
    a.out = out.ptr<float>() + s.first_token * Hq * Dv;
    a.hq = Hq;
    a.hkv = Hkv;
    a.dqk = D;
    a.dv = Dv;
    a.scale = static_cast<float>(c.real("scaling"));
    a.sliding_window = c.integer("sliding_window");
    a.chunk_size = c.integer("chunk_size");
    a.softcap = static_cast<float>(c.real("softcap"));
    a.sinks = sinks;
    a.alibi_slopes = slopes.empty() ? nullptr : slopes.data();
    args.push_back(a);
    covered += s.num_tokens;
  }
  if (covered != T) c.fail("batch covers " + std::to_string(covered) + " of " + std::to_string(T) + " tokens");
  kernels::attention_batch(args);
  set_out(c, out);
}

}  // namespace

void register_attention_ops(OpRegistry& r) { r.add("fuselm.attention.default", attention); }

}  // namespace fuselm::runtime::ops
