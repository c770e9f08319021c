// fuselm.mla_attention(q [1,H,T,Dn+Dr], latent [..,T,R], k_rot [..,T,Dr], w_up [H·(Dn+Dv), R],
// scaling, layer_idx, nope_dim Dn, v_dim Dv) -> [1, T, H, Dv]: multi-head latent attention over
// the latent KV cache, inserted by the mla fuser (src/fusers/mla.cc, docs/mla.md).
//
// The cache row of a token is [latent (R) | k_rot (Dr)]: one copy, no heads. The up-projection
// w_up holds per head h the rows [h·(Dn+Dv), +Dn) = W_k (k_nope = W_k·latent) and the next Dv rows
// = W_v (v = W_v·latent). Per sequence the op takes the cheaper of two exact forms:
//   absorbed (decode, short chunks): q'_h = [q_nope_h · W_k | q_rot_h] against the rows, then
//     out_h = W_v · Σ_j p_j row_j[:R]: MQA with one KV head of width R+Dr whose value is the row's
//     first R floats, run by the engine's attention kernel directly over the cache rows; K and V
//     are never expanded per head;
//   expanded (long prefill chunks): K/V of the whole context expanded from the rows by one GEMM
//     per group of heads into scratch (never cached), then ordinary attention.
// Absorbed costs t·ctx·H·(2R+Dr) + t·H·(Dn+Dv)·R, expanded ctx·H·(Dn+Dv)·R + t·ctx·H·(Dn+Dr+Dv);
// the op expands when t·(2R+Dr-Dn-Dr-Dv) > (Dn+Dv)·R. Weights are read in their storage dtype.
// The cache is f32, bf16 or q8_0 (--kv-cache-dtype; q8_0 pads the latent and the rope key each to
// whole 32-blocks), read in place in its dtype. The op checks shapes and slots; writing the rows
// (kernels::mla_write_latent) and the arithmetic (kernels::mla_attention) are kernels/cpu/mla.h.

#include "kernels/cpu/dtype.h"

#include "kernels/cpu/mla.h"
#include "kv/paged_kv_cache.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

// [..., T, W] with every leading dim 1 (the graph's [1, 1, T, W] latent and rope key).
void check_rows(OpCall& c, const Tensor& t, int64_t T, const char* what) {
  for (int d = 0; d < t.ndim - 2; ++d)
    if (t.shape[d] != 1) c.fail(fmt::format("{} {} is not [..., tokens, width] with leading 1s", what, t.describe()));
  if (t.ndim < 2 || t.shape[t.ndim - 2] != T)
    c.fail(fmt::format("{} {} does not have {} tokens", what, t.describe(), T));
}

void mla_attention(OpCall& c) {
  const Tensor& q = c.tensor("q");
  const Tensor& lat = c.tensor("latent");
  const Tensor& rot = c.tensor("k_rot");
  const Tensor& w = c.tensor("w_up");
  const double scale = c.real("scaling");
  const int64_t layer = c.integer("layer_idx"), Dn = c.integer("nope_dim"), Dv = c.integer("v_dim");
  if (q.ndim != 4 || q.shape[0] != 1) c.fail("expected q of shape [1, heads, tokens, head_dim], got " + q.describe());
  const int64_t H = q.shape[1], T = q.shape[2], Dqk = q.shape[3];
  check_rows(c, lat, T, "latent");
  check_rows(c, rot, T, "rope key");
  const int64_t R = lat.shape[lat.ndim - 1], Dr = rot.shape[rot.ndim - 1];
  if (Dqk != Dn + Dr) c.fail(fmt::format("q head size {} != nope {} + rope {}", Dqk, Dn, Dr));
  if (w.ndim != 2 || w.shape[0] != H * (Dn + Dv) || w.shape[1] != R)
    c.fail(fmt::format("up-projection {} is not [{} heads x ({} + {}), {}]", w.describe(), H, Dn, Dv, R));
  const Batch& batch = c.ctx.batch();
  if (!batch.kv) c.fail("no KV cache was given to the executor");
  if (layer < 0 || layer >= batch.kv->num_layers()) c.fail(fmt::format("layer index {} has no KV cache", layer));
  const auto& ls = batch.kv->layer_shape(static_cast<int>(layer));
  if (!ls.latent || ls.k_width != R + Dr || ls.k_head != R || ls.v_width != 0)
    c.fail(fmt::format("KV cache layer {} rows are {}+{} values (latent part {}), not a latent row of {} + {}", layer,
                       ls.k_width, ls.v_width, ls.latent ? ls.k_head : 0, R, Dr));

  Scratch sq(c.ctx), sl(c.ctx), sr(c.ctx);
  const Tensor qf = contiguous_as(q, DType::f32, sq);  // [H, T, Dn+Dr]
  const Tensor lf = contiguous_as(lat, DType::f32, sl);
  const Tensor rf = contiguous_as(rot, DType::f32, sr);
  const float* Q = qf.ptr<float>();
  const kernels::DType wd = weight_storage(c, w, "up-projection weight");
  if (!w.is_contiguous()) c.fail("up-projection weight " + w.describe() + " is not contiguous");
  const kv::KvDType kd = batch.kv->dtype();
  const int li = static_cast<int>(layer);
  const kernels::MlaCacheType ct = kd == kv::KvDType::q8_0   ? kernels::MlaCacheType::q8_0
                                   : kd == kv::KvDType::bf16 ? kernels::MlaCacheType::bf16
                                                             : kernels::MlaCacheType::f32;
  void* cache = kd == kv::KvDType::q8_0   ? batch.kv->k_q8_0(li)
                : kd == kv::KvDType::bf16 ? static_cast<void*>(batch.kv->k_bf16(li))
                                          : static_cast<void*>(batch.kv->k(li));
  Tensor out = c.alloc(DType::f32, {1, T, H, Dv});
  float* O = out.ptr<float>();

  // New rows first: every sequence's context is complete in the cache before it is read.
  int64_t covered = 0;
  for (const auto& s : batch.sequences) {
    if (s.first_token + s.num_tokens > T || s.num_tokens > s.context_len)
      c.fail("batch layout does not match the token count");
    const int32_t* slots = s.slots + (s.context_len - s.num_tokens);
    for (int64_t i = 0; i < s.num_tokens; ++i)
      if (slots[i] < 0 || slots[i] >= batch.kv->num_slots())
        c.fail(fmt::format("slot {} is outside the KV cache", slots[i]));
    kernels::mla_write_latent(lf.ptr<float>() + s.first_token * R, rf.ptr<float>() + s.first_token * Dr, s.num_tokens,
                              R, Dr, slots, cache, ct);
    covered += s.num_tokens;
  }
  if (covered != T) c.fail(fmt::format("batch covers {} of {} tokens", covered, T));

  for (const auto& s : batch.sequences) {
    kernels::MlaArgs m;
    m.q = Q + s.first_token * (Dn + Dr);
    m.q_head_stride = T * (Dn + Dr);
    m.cache = cache;
    m.cache_type = ct;
    m.num_slots = batch.kv->num_slots();
    m.slots = s.slots;
    m.ctx = s.context_len, m.t = s.num_tokens;
    m.w_up = w.data;
    m.w_dtype = wd;
    m.H = H, m.R = R, m.Dr = Dr, m.Dn = Dn, m.Dv = Dv;
    m.scale = static_cast<float>(scale);
    m.out = O + s.first_token * H * Dv;
    Scratch ss(c.ctx);
    const int64_t n = kernels::mla_scratch_floats(m);
    m.scratch = ss.alloc(DType::f32, std::span<const int64_t>(&n, 1)).ptr<float>();
    kernels::mla_attention(m);
  }
  set_out(c, out);
}

}  // namespace

void register_mla_ops(OpRegistry& r) { r.add("fuselm.mla_attention.default", mla_attention); }

}  // namespace fuselm::runtime::ops
