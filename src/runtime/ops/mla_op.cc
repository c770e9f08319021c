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
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/linear.h"
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
  const Tensor& q = c.tensor(0);
  const Tensor& lat = c.tensor(1);
  const Tensor& rot = c.tensor(2);
  const Tensor& w = c.tensor(3);
  const double scale = c.real(4);
  const int64_t layer = c.integer(5), Dn = c.integer(6), Dv = c.integer(7);
  if (q.ndim != 4 || q.shape[0] != 1) c.fail("expected q of shape [1, heads, tokens, head_dim], got " + q.describe());
  const int64_t H = q.shape[1], T = q.shape[2], Dqk = q.shape[3];
  check_rows(c, lat, T, "latent");
  check_rows(c, rot, T, "rope key");
  const int64_t R = lat.shape[lat.ndim - 1], Dr = rot.shape[rot.ndim - 1];
  if (Dqk != Dn + Dr) c.fail(fmt::format("q head size {} != nope {} + rope {}", Dqk, Dn, Dr));
  if (w.ndim != 2 || w.shape[0] != H * (Dn + Dv) || w.shape[1] != R)
    c.fail(fmt::format("up-projection {} is not [{} heads x ({} + {}), {}]", w.describe(), H, Dn, Dv, R));
  const Batch& batch = c.ex.batch();
  if (!batch.kv) c.fail("no KV cache was given to the executor");
  if (layer < 0 || layer >= batch.kv->num_layers()) c.fail(fmt::format("layer index {} has no KV cache", layer));
  const auto& ls = batch.kv->layer_shape(static_cast<int>(layer));
  if (ls.k_width != R + Dr || ls.v_width != 0)
    c.fail(fmt::format("KV cache layer {} rows are {}+{} floats, not a latent row of {}", layer, ls.k_width,
                       ls.v_width, R + Dr));

  Scratch sq(c.ex), sl(c.ex), sr(c.ex);
  const Tensor qf = contiguous_as(q, DType::f32, sq);  // [H, T, Dn+Dr]
  const Tensor lf = contiguous_as(lat, DType::f32, sl);
  const Tensor rf = contiguous_as(rot, DType::f32, sr);
  const float* Q = qf.ptr<float>();
  const int64_t Dl = R + Dr, Dkv = Dn + Dv;
  kernels::DType wd = kernels::DType::f32;
  if (w.dtype == DType::bf16) wd = kernels::DType::bf16;
  else if (w.dtype == DType::f16) wd = kernels::DType::f16;
  else if (w.dtype != DType::f32) c.fail("up-projection weight dtype " + w.describe() + " is not f32, bf16 or f16");
  if (!w.is_contiguous()) c.fail("up-projection weight " + w.describe() + " is not contiguous");
  const auto* W = static_cast<const char*>(w.data);
  const size_t wes = ir::dtype_size(w.dtype);
  auto w_rows = [&](int64_t row) { return static_cast<const void*>(W + row * R * wes); };
  float* cache = batch.kv->k(static_cast<int>(layer));
  Tensor out = c.alloc(DType::f32, {1, T, H, Dv});
  float* O = out.ptr<float>();

  // New rows first: every sequence's context is complete in the cache before it is read.
  int64_t covered = 0;
  for (const auto& s : batch.sequences) {
    if (s.first_token + s.num_tokens > T || s.num_tokens > s.context_len)
      c.fail("batch layout does not match the token count");
    const int64_t first = s.context_len - s.num_tokens;
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      const int32_t slot = s.slots[first + i];
      if (slot < 0 || slot >= batch.kv->num_slots()) c.fail(fmt::format("slot {} is outside the KV cache", slot));
      float* row = cache + int64_t{slot} * Dl;
      std::memcpy(row, lf.ptr<float>() + (s.first_token + i) * R, static_cast<size_t>(R) * sizeof(float));
      std::memcpy(row + R, rf.ptr<float>() + (s.first_token + i) * Dr, static_cast<size_t>(Dr) * sizeof(float));
    }
    covered += s.num_tokens;
  }
  if (covered != T) c.fail(fmt::format("batch covers {} of {} tokens", covered, T));

  for (const auto& s : batch.sequences) {
    const int64_t t = s.num_tokens, ctx = s.context_len;
    if (t == 0) continue;
    const bool expand = t > 1 && t * (2 * R + Dr - Dn - Dr - Dv) > Dkv * R;
    kernels::AttentionArgs a;
    a.num_slots = batch.kv->num_slots();
    a.ctx_len = ctx;
    a.t = t;
    a.scale = static_cast<float>(scale);
    if (!expand) {
      Scratch sa(c.ex), so(c.ex);
      const int64_t qa_shape[] = {t, H, Dl}, ol_shape[] = {t, H, R};
      Tensor qa = sa.alloc(DType::f32, qa_shape);
      Tensor ol = so.alloc(DType::f32, ol_shape);
      // Heads in one parallel region (kernels::linear runs single-threaded inside it): one join per
      // projection instead of one per head, which matters for decode on a busy machine.
      const int nt = t * H * Dkv * R >= (int64_t{1} << 16) ? omp_get_max_threads() : 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
      for (int64_t h = 0; h < H; ++h) {  // q'_h[:, :R] = q_nope_h · W_k[h]  (W_k[h] is [Dn, R]: kn)
        kernels::LinearArgs l;
        l.x = Q + (h * T + s.first_token) * (Dn + Dr);
        l.lda = Dn + Dr;
        l.w = w_rows(h * Dkv);
        l.w_dtype = wd;
        l.w_layout = kernels::WeightLayout::kn;
        l.ldw = R;
        l.y = qa.ptr<float>() + h * Dl;
        l.ldy = H * Dl;
        l.m = t, l.n = R, l.k = Dn;
        kernels::linear(l);
        for (int64_t i = 0; i < t; ++i)
          std::memcpy(qa.ptr<float>() + (i * H + h) * Dl + R, Q + (h * T + s.first_token + i) * (Dn + Dr) + Dn,
                      static_cast<size_t>(Dr) * sizeof(float));
      }
      a.k_cache = cache;
      a.v_cache = cache;  // V = the first R floats of the row
      a.k_row_stride = Dl;
      a.v_row_stride = Dl;
      a.slots = s.slots;
      a.q = qa.ptr<float>();
      a.out = ol.ptr<float>();
      a.hq = H, a.hkv = 1, a.dqk = Dl, a.dv = R;
      kernels::attention(a);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
      for (int64_t h = 0; h < H; ++h) {  // out_h = W_v[h] · o_h  (W_v[h] is [Dv, R]: nk)
        kernels::LinearArgs l;
        l.x = ol.ptr<float>() + h * R;
        l.lda = H * R;
        l.w = w_rows(h * Dkv + Dn);
        l.w_dtype = wd;
        l.ldw = R;
        l.y = O + s.first_token * H * Dv + h * Dv;
        l.ldy = H * Dv;
        l.m = t, l.n = Dv, l.k = R;
        kernels::linear(l);
      }
      continue;
    }
    // Expanded: the context's rows gathered once, then per group of heads K/V from one GEMM.
    Scratch sc(c.ex), sk(c.ex), sv(c.ex), se(c.ex), so(c.ex);
    const int64_t lat_shape[] = {ctx, R};
    Tensor rows = sc.alloc(DType::f32, lat_shape);
    for (int64_t j = 0; j < ctx; ++j)
      std::memcpy(rows.ptr<float>() + j * R, cache + int64_t{s.slots[j]} * Dl, static_cast<size_t>(R) * sizeof(float));
    const int64_t group = std::clamp<int64_t>((int64_t{1} << 24) / std::max<int64_t>(1, ctx * (Dkv + Dn + Dr + Dv)), 1, H);
    const int64_t e_shape[] = {ctx, group * Dkv}, k_shape[] = {ctx, group * (Dn + Dr)}, v_shape[] = {ctx, group * Dv},
                  o_shape[] = {t, group, Dv};
    Tensor ex = se.alloc(DType::f32, e_shape), kx = sk.alloc(DType::f32, k_shape), vx = sv.alloc(DType::f32, v_shape),
           ox = so.alloc(DType::f32, o_shape);
    std::vector<int32_t> dense(static_cast<size_t>(ctx));
    for (int64_t j = 0; j < ctx; ++j) dense[j] = static_cast<int32_t>(j);
    for (int64_t h0 = 0; h0 < H; h0 += group) {
      const int64_t g = std::min(group, H - h0);
      kernels::LinearArgs l;
      l.x = rows.ptr<float>();
      l.w = w_rows(h0 * Dkv);
      l.w_dtype = wd;
      l.ldw = R;
      l.y = ex.ptr<float>();
      l.m = ctx, l.n = g * Dkv, l.k = R;
      kernels::linear(l);
      for (int64_t j = 0; j < ctx; ++j) {
        const float* e = ex.ptr<float>() + j * g * Dkv;
        const float* kr = cache + int64_t{s.slots[j]} * Dl + R;
        for (int64_t h = 0; h < g; ++h) {
          float* k = kx.ptr<float>() + (j * g + h) * (Dn + Dr);
          std::memcpy(k, e + h * Dkv, static_cast<size_t>(Dn) * sizeof(float));
          std::memcpy(k + Dn, kr, static_cast<size_t>(Dr) * sizeof(float));
          std::memcpy(vx.ptr<float>() + (j * g + h) * Dv, e + h * Dkv + Dn, static_cast<size_t>(Dv) * sizeof(float));
        }
      }
      kernels::AttentionArgs b = a;
      b.num_slots = ctx;
      b.slots = dense.data();
      b.k_cache = kx.ptr<float>();
      b.v_cache = vx.ptr<float>();
      b.q = Q + (h0 * T + s.first_token) * (Dn + Dr);
      b.q_token_stride = Dn + Dr;
      b.q_head_stride = T * (Dn + Dr);
      b.out = ox.ptr<float>();
      b.hq = g, b.hkv = g, b.dqk = Dn + Dr, b.dv = Dv;
      kernels::attention(b);
      for (int64_t i = 0; i < t; ++i)
        std::memcpy(O + ((s.first_token + i) * H + h0) * Dv, ox.ptr<float>() + i * g * Dv,
                    static_cast<size_t>(g * Dv) * sizeof(float));
    }
  }
  set_out(c, out);
}

}  // namespace

void register_mla_ops(OpRegistry& r) { r.add("fuselm.mla_attention.default", mla_attention); }

}  // namespace fuselm::runtime::ops
