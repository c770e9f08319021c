// The stateful (recurrent) ops capture puts in place of transformers' kernel dispatch points
// (docs/recurrent.md; schemas: python/fuselm_capture/recurrent_ops.py):
//   fuselm.causal_conv1d(x [1,C,T], weight [C,K], bias?, activation, state_idx) -> [1,C,T]
//   fuselm.ssd_scan(x [1,T,H,P], dt [1,T,H], A [H], B, C [1,T,G,N], D?, dt_bias?, dt_softplus,
//                   dt_min, dt_max, state_idx) -> [1,T,H,P]
//   fuselm.selective_scan(x, dt [1,Dm,T], A [Dm,N], B, C [1,N,T] | [1,G,N,T], D?, z?, dt_bias?,
//                         dt_softplus, state_idx) -> [1,Dm,T]
//   fuselm.gated_delta_rule(q, k [1,T,Hk,Dk], v [1,T,Hv,Dv], g [1,T,Hv] | [1,T,Hv,Dk], beta [1,T,Hv],
//                           use_qk_l2norm, state_idx) -> [1,T,Hv,Dv]
//   fuselm.decay_softmax_scan(k, v [1,T,C], w [C], u [C], state_idx) -> [1,T,C]
//   fuselm.linear_scan(a, b [1,T,C], state_idx) -> [1,T,C]
// Like fuselm.attention they know the sequences of the flattened batch: each sequence's tokens run
// from the state in its slot of the StateCache (state `state_idx`; zeros when the sequence has no
// earlier tokens) and the state after its last token is written back. The kernels and the state
// layouts: kernels/cpu/recurrent/recurrent.h. Outputs take the strides of x as torch.empty_like
// does (the fake functions capture traced with), so later views of them hold.
#include <fmt/core.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/recurrent/recurrent.h"
#include "kv/state_cache.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

using kernels::RecurrentSeq;

/// The batch's sequences as kernel work: each with its state `state_idx` of `floats` values.
/// Fails without a state cache, for a state of another size, a slice without a slot, or a batch
/// that does not cover the T tokens.
std::vector<RecurrentSeq> sequences(const OpCall& c, int64_t floats, int64_t T) {
  const Batch& batch = c.ctx.batch();
  if (!batch.state) c.fail("no recurrent state cache was given to the executor (a stateful op needs state slots)");
  const int64_t idx = c.integer("state_idx");
  if (idx < 0 || idx >= batch.state->num_states())
    c.fail(fmt::format("state index {} has no state in the cache ({} states)", idx, batch.state->num_states()));
  const int si = static_cast<int>(idx);
  if (batch.state->floats(si) != floats)
    c.fail(fmt::format("state {} holds {} floats per sequence but the operands need {}", idx,
                       batch.state->floats(si), floats));
  std::vector<RecurrentSeq> out;
  int64_t covered = 0;
  for (const auto& s : batch.sequences) {
    if (s.num_tokens == 0) continue;
    if (s.state_slot < 0) c.fail("a sequence of the batch has no state slot");
    if (s.first_token < 0 || s.first_token + s.num_tokens > T) c.fail("batch layout does not match the token count");
    out.push_back({s.first_token, s.num_tokens, batch.state->at(si, s.state_slot), s.context_len == s.num_tokens});
    covered += s.num_tokens;
  }
  if (covered != T) c.fail(fmt::format("batch covers {} of {} tokens", covered, T));
  return out;
}

/// A new f32 tensor shaped like x with x's dim order (torch.empty_like's preserve_format: x's
/// strides when x is dense, else contiguous).
Tensor alloc_like(OpCall& c, const Tensor& x) {
  Tensor out = c.alloc(DType::f32, x.sizes());
  std::vector<int> order(x.ndim);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x.strides[a] > x.strides[b]; });
  int64_t expect = 1;
  bool dense = true;
  for (int i = x.ndim - 1; i >= 0; --i) {
    const int d = order[i];
    if (x.shape[d] != 1 && x.strides[d] != expect) dense = false;
    expect *= x.shape[d];
  }
  if (!dense) return out;
  expect = 1;
  for (int i = x.ndim - 1; i >= 0; --i) {
    out.strides[order[i]] = expect;
    expect *= x.shape[order[i]];
  }
  return out;
}

/// t as f32 with a unit stride in its last dim (unit_last) or any strides; a copy when needed.
Tensor f32_view(const Tensor& t, Scratch& s, bool unit_last) {
  const bool ok = t.dtype == DType::f32 && (!unit_last || t.ndim == 0 || t.strides[t.ndim - 1] == 1 ||
                                            t.shape[t.ndim - 1] == 1);
  return ok ? t : contiguous_as(t, DType::f32, s);
}

/// An optional per-head / per-channel vector of n values (nullptr when absent); fails naming it.
const float* vector_arg(OpCall& c, std::string_view name, int64_t n, Scratch& s) {
  if (!c.has(name)) return nullptr;
  const Tensor& t = c.tensor(name);
  if (t.numel() != n) c.fail(fmt::format("{} has {} values, expected {}", name, t.numel(), n));
  return contiguous_as(t, DType::f32, s).ptr<float>();
}

/// Hands the f32 result to the node, converted to its captured dtype when that is another.
void finish(OpCall& c, const Tensor& y) {
  if (c.out_dtype() == DType::f32) return set_out(c, y);
  Tensor o = c.alloc(c.out_dtype(), y.sizes());
  copy_into(y, o);
  set_out(c, o);
}

void expect_shape(OpCall& c, const Tensor& t, std::string_view name, std::initializer_list<int64_t> shape) {
  bool ok = t.ndim == static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) ok = ok && (s < 0 || t.shape[d++] == s);
  if (!ok) c.fail(fmt::format("{} is {}, which does not fit the other operands", name, t.describe()));
}

// ---- fuselm.causal_conv1d ----------------------------------------------------------------------

bool conv_silu(OpCall& c) {
  const Value& v = c.arg("activation");
  if (v.is_none()) return false;
  const std::string_view a = v.kind == Value::Kind::string && v.s ? std::string_view(v.s) : "";
  if (a == "none") return false;
  if (a == "silu" || a == "swish") return true;
  c.fail(fmt::format("activation '{}' is not one of none, silu", a));
}

void causal_conv1d(OpCall& c) {
  const Tensor& x = c.tensor("x");
  const Tensor& w = c.tensor("weight");
  if (x.ndim != 3 || x.shape[0] != 1 || w.ndim != 2 || w.shape[0] != x.shape[1])
    c.fail("expected x [1, C, T] and weight [C, K], got x " + x.describe() + ", weight " + w.describe());
  const int64_t C = x.shape[1], T = x.shape[2], K = w.shape[1];
  const bool silu = conv_silu(c);
  Scratch sx(c.ctx), sw(c.ctx), sb(c.ctx);
  const Tensor xf = f32_view(x, sx, false);
  Tensor out = alloc_like(c, x);
  const auto seqs = sequences(c, C * std::max<int64_t>(K - 1, 1), T);
  kernels::Conv1dArgs a;
  a.x = xf.ptr<float>();
  a.x_c = xf.strides[1];
  a.x_t = xf.strides[2];
  a.weight = contiguous_as(w, DType::f32, sw).ptr<float>();
  a.bias = vector_arg(c, "bias", C, sb);
  a.out = out.ptr<float>();
  a.out_c = out.strides[1];
  a.out_t = out.strides[2];
  a.channels = C;
  a.width = K;
  a.silu = silu;
  if (T > 0) kernels::causal_conv1d(a, seqs);
  finish(c, out);
}

// ---- fuselm.ssd_scan ---------------------------------------------------------------------------

void ssd_scan(OpCall& c) {
  const Tensor& x = c.tensor("x");
  if (x.ndim != 4 || x.shape[0] != 1) c.fail("expected x [1, T, H, P], got " + x.describe());
  const int64_t T = x.shape[1], H = x.shape[2], P = x.shape[3];
  const Tensor& B = c.tensor("B");
  if (B.ndim != 4) c.fail("expected B [1, T, G, N], got " + B.describe());
  const int64_t G = B.shape[2], N = B.shape[3];
  expect_shape(c, B, "B", {1, T, G, N});
  expect_shape(c, c.tensor("C"), "C", {1, T, G, N});
  expect_shape(c, c.tensor("dt"), "dt", {1, T, H});
  if (G <= 0 || H % G != 0) c.fail(fmt::format("{} groups do not divide {} heads", G, H));
  Scratch sx(c.ctx), sdt(c.ctx), sa(c.ctx), sB(c.ctx), sC(c.ctx), sd(c.ctx), sbias(c.ctx), sy(c.ctx);
  const Tensor xf = f32_view(x, sx, true), dtf = f32_view(c.tensor("dt"), sdt, false);
  const Tensor Bf = f32_view(B, sB, true), Cf = f32_view(c.tensor("C"), sC, true);
  const float* A = vector_arg(c, "A", H, sa);
  if (!A) c.fail("A is missing");
  Tensor out = alloc_like(c, x);
  Tensor y = out.strides[3] == 1 ? out : sy.alloc(DType::f32, x.sizes());
  const auto seqs = sequences(c, H * P * N, T);
  kernels::SsdArgs a;
  a.x = xf.ptr<float>(), a.x_t = xf.strides[1], a.x_h = xf.strides[2];
  a.dt = dtf.ptr<float>(), a.dt_t = dtf.strides[1], a.dt_h = dtf.strides[2];
  a.A = A;
  a.B = Bf.ptr<float>(), a.b_t = Bf.strides[1], a.b_g = Bf.strides[2];
  a.C = Cf.ptr<float>(), a.c_t = Cf.strides[1], a.c_g = Cf.strides[2];
  a.D = vector_arg(c, "D", H, sd);
  a.dt_bias = vector_arg(c, "dt_bias", H, sbias);
  a.y = y.ptr<float>(), a.y_t = y.strides[1], a.y_h = y.strides[2];
  a.heads = H, a.head_dim = P, a.groups = G, a.state_dim = N;
  a.dt_softplus = c.boolean("dt_softplus");
  a.dt_min = static_cast<float>(c.real("dt_min"));
  a.dt_max = static_cast<float>(c.real("dt_max"));
  if (T > 0) kernels::ssd_scan(a, seqs);
  if (y.data != out.data) copy_into(y, out);
  finish(c, out);
}

// ---- fuselm.selective_scan ---------------------------------------------------------------------

/// B or C ([1, N, T] or [1, G, N, T]) as a dense [G, T, N] copy, the layout the kernel reads.
Tensor groups_tokens_state(OpCall& c, std::string_view name, int64_t T, Scratch& s) {
  const Tensor& t = c.tensor(name);
  const bool grouped = t.ndim == 4;
  if ((t.ndim != 3 && t.ndim != 4) || t.shape[0] != 1 || t.shape[t.ndim - 1] != T)
    c.fail(fmt::format("expected {} [1, N, T] or [1, G, N, T], got {}", name, t.describe()));
  Tensor v = t;  // a [G, T, N] view of it
  v.ndim = 3;
  v.shape = {grouped ? t.shape[1] : 1, T, t.shape[t.ndim - 2]};
  v.strides = {grouped ? t.strides[1] : 0, t.strides[t.ndim - 1], t.strides[t.ndim - 2]};
  Tensor d = s.alloc(DType::f32, v.sizes());
  copy_into(v, d);
  return d;
}

void selective_scan(OpCall& c) {
  const Tensor& x = c.tensor("x");
  const Tensor& A = c.tensor("A");
  if (x.ndim != 3 || x.shape[0] != 1 || A.ndim != 2 || A.shape[0] != x.shape[1])
    c.fail("expected x [1, Dm, T] and A [Dm, N], got x " + x.describe() + ", A " + A.describe());
  const int64_t Dm = x.shape[1], T = x.shape[2], N = A.shape[1];
  expect_shape(c, c.tensor("dt"), "dt", {1, Dm, T});
  if (c.has("z")) expect_shape(c, c.tensor("z"), "z", {1, Dm, T});
  Scratch sx(c.ctx), sdt(c.ctx), sz(c.ctx), sa(c.ctx), sB(c.ctx), sC(c.ctx), sd(c.ctx), sbias(c.ctx);
  const Tensor B = groups_tokens_state(c, "B", T, sB), C = groups_tokens_state(c, "C", T, sC);
  if (B.shape[2] != N || C.shape[2] != N || B.shape[0] != C.shape[0] || Dm % B.shape[0] != 0)
    c.fail(fmt::format("B and C must have {} state channels in groups dividing {} channels", N, Dm));
  const Tensor xf = f32_view(x, sx, false), dtf = f32_view(c.tensor("dt"), sdt, false);
  Tensor out = alloc_like(c, x);
  const auto seqs = sequences(c, Dm * N, T);
  kernels::SelectiveArgs a;
  a.x = xf.ptr<float>(), a.x_d = xf.strides[1], a.x_t = xf.strides[2];
  a.dt = dtf.ptr<float>(), a.dt_d = dtf.strides[1], a.dt_t = dtf.strides[2];
  if (c.has("z")) {
    const Tensor zf = f32_view(c.tensor("z"), sz, false);
    a.z = zf.ptr<float>(), a.z_d = zf.strides[1], a.z_t = zf.strides[2];
  }
  a.A = contiguous_as(A, DType::f32, sa).ptr<float>();
  a.B = B.ptr<float>();
  a.C = C.ptr<float>();
  a.D = vector_arg(c, "D", Dm, sd);
  a.dt_bias = vector_arg(c, "dt_bias", Dm, sbias);
  a.y = out.ptr<float>(), a.y_d = out.strides[1], a.y_t = out.strides[2];
  a.channels = Dm, a.state_dim = N, a.groups = B.shape[0], a.tokens = T;
  a.dt_softplus = c.boolean("dt_softplus");
  if (T > 0) kernels::selective_scan(a, seqs);
  finish(c, out);
}

// ---- fuselm.gated_delta_rule -------------------------------------------------------------------

void gated_delta_rule(OpCall& c) {
  const Tensor& q = c.tensor("q");
  const Tensor& k = c.tensor("k");
  const Tensor& v = c.tensor("v");
  if (q.ndim != 4 || v.ndim != 4 || q.shape[0] != 1)
    c.fail("expected q, k [1, T, Hk, Dk] and v [1, T, Hv, Dv], got q " + q.describe() + ", v " + v.describe());
  const int64_t T = q.shape[1], Hk = q.shape[2], Dk = q.shape[3], Hv = v.shape[2], Dv = v.shape[3];
  expect_shape(c, k, "k", {1, T, Hk, Dk});
  expect_shape(c, v, "v", {1, T, Hv, Dv});
  expect_shape(c, c.tensor("beta"), "beta", {1, T, Hv});
  const Tensor& g = c.tensor("g");
  const bool per_channel = g.ndim == 4;
  if (per_channel) expect_shape(c, g, "g", {1, T, Hv, Dk});
  else expect_shape(c, g, "g", {1, T, Hv});
  if (Hk <= 0 || Hv % Hk != 0) c.fail(fmt::format("{} key heads do not divide {} value heads", Hk, Hv));
  Scratch sq(c.ctx), sk(c.ctx), sv(c.ctx), sg(c.ctx), sb(c.ctx);
  const Tensor qf = f32_view(q, sq, true), kf = f32_view(k, sk, true), vf = f32_view(v, sv, true);
  const Tensor gf = f32_view(g, sg, per_channel), bf = f32_view(c.tensor("beta"), sb, false);
  Tensor out = c.alloc(DType::f32, v.sizes());
  const auto seqs = sequences(c, Hv * Dk * Dv, T);
  kernels::DeltaRuleArgs a;
  a.q = qf.ptr<float>(), a.q_t = qf.strides[1], a.q_h = qf.strides[2];
  a.k = kf.ptr<float>(), a.k_t = kf.strides[1], a.k_h = kf.strides[2];
  a.v = vf.ptr<float>(), a.v_t = vf.strides[1], a.v_h = vf.strides[2];
  a.g = gf.ptr<float>(), a.g_t = gf.strides[1], a.g_h = gf.strides[2];
  a.beta = bf.ptr<float>(), a.beta_t = bf.strides[1], a.beta_h = bf.strides[2];
  a.out = out.ptr<float>(), a.o_t = out.strides[1], a.o_h = out.strides[2];
  a.k_heads = Hk, a.v_heads = Hv, a.k_dim = Dk, a.v_dim = Dv;
  a.per_channel_g = per_channel;
  a.l2norm = c.boolean("use_qk_l2norm");
  if (T > 0) kernels::gated_delta_rule(a, seqs);
  finish(c, out);
}

// ---- fuselm.decay_softmax_scan -----------------------------------------------------------------

void decay_softmax_scan(OpCall& c) {
  const Tensor& k = c.tensor("k");
  if (k.ndim != 3 || k.shape[0] != 1) c.fail("expected k [1, T, C], got " + k.describe());
  const int64_t T = k.shape[1], C = k.shape[2];
  expect_shape(c, c.tensor("v"), "v", {1, T, C});
  Scratch sk(c.ctx), sv(c.ctx), sw(c.ctx), su(c.ctx);
  const Tensor kf = f32_view(k, sk, true), vf = f32_view(c.tensor("v"), sv, true);
  Tensor out = c.alloc(DType::f32, k.sizes());
  const auto seqs = sequences(c, 3 * C, T);
  kernels::SoftmaxScanArgs a;
  a.k = kf.ptr<float>(), a.k_t = kf.strides[1];
  a.v = vf.ptr<float>(), a.v_t = vf.strides[1];
  a.w = vector_arg(c, "w", C, sw);
  a.u = vector_arg(c, "u", C, su);
  if (!a.w || !a.u) c.fail("w and u are required");
  a.out = out.ptr<float>(), a.o_t = out.strides[1];
  a.channels = C;
  if (T > 0) kernels::decay_softmax_scan(a, seqs);
  finish(c, out);
}

// ---- fuselm.linear_scan ------------------------------------------------------------------------

void linear_scan(OpCall& c) {
  const Tensor& b = c.tensor("b");
  if (b.ndim != 3 || b.shape[0] != 1) c.fail("expected b [1, T, C], got " + b.describe());
  const int64_t T = b.shape[1], C = b.shape[2];
  expect_shape(c, c.tensor("a"), "a", {1, T, C});
  Scratch sa(c.ctx), sb(c.ctx);
  const Tensor af = f32_view(c.tensor("a"), sa, true), bf = f32_view(b, sb, true);
  Tensor out = c.alloc(DType::f32, b.sizes());
  const auto seqs = sequences(c, C, T);
  kernels::LinearScanArgs a;
  a.a = af.ptr<float>(), a.a_t = af.strides[1];
  a.b = bf.ptr<float>(), a.b_t = bf.strides[1];
  a.out = out.ptr<float>(), a.o_t = out.strides[1];
  a.channels = C;
  if (T > 0 && C > 0) kernels::linear_scan(a, seqs);
  finish(c, out);
}

}  // namespace

void register_recurrent_ops(OpRegistry& r) {
  r.add("fuselm.causal_conv1d.default", causal_conv1d);
  r.add("fuselm.ssd_scan.default", ssd_scan);
  r.add("fuselm.selective_scan.default", selective_scan);
  r.add("fuselm.gated_delta_rule.default", gated_delta_rule);
  r.add("fuselm.decay_softmax_scan.default", decay_softmax_scan);
  r.add("fuselm.linear_scan.default", linear_scan);
}

}  // namespace fuselm::runtime::ops
