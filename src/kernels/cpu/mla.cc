#include "kernels/cpu/mla.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/threading.h"

namespace fuselm::kernels {
namespace {

const void* w_rows(const MlaArgs& a, int64_t row) {
  return static_cast<const char*>(a.w_up) + row * a.R * dtype_size(a.w_dtype);
}

// Heads per expansion GEMM: the expanded K/V of a group stay within 16M floats.
int64_t expand_group(const MlaArgs& a) {
  const int64_t Dkv = a.Dn + a.Dv;
  return std::clamp<int64_t>((int64_t{1} << 24) / std::max<int64_t>(1, a.ctx * (Dkv + a.Dn + a.Dr + a.Dv)), 1, a.H);
}

void absorbed(const MlaArgs& a, AttentionArgs at) {
  const int64_t t = a.t, H = a.H, R = a.R, Dr = a.Dr, Dn = a.Dn, Dv = a.Dv;
  const int64_t Dl = R + Dr, Dkv = Dn + Dv;
  float* qa = a.scratch;          // [t, H, Dl]
  float* ol = qa + t * H * Dl;    // [t, H, R]
  // Heads in one parallel task (kernels::linear runs single-threaded inside it): one join per
  // projection instead of one per head, which matters for decode on a busy machine.
  const int nt = t * H * Dkv * R >= (int64_t{1} << 16) ? kernel_threads(H, 1) : 1;
  parallel_for_ranges(nt, H, 1, [&](int64_t h0, int64_t h1) {
  for (int64_t h = h0; h < h1; ++h) {  // q'_h[:, :R] = q_nope_h · W_k[h]  (W_k[h] is [Dn, R]: kn)
    LinearArgs l;
    l.x = a.q + h * a.q_head_stride;
    l.lda = Dn + Dr;
    l.w = w_rows(a, h * Dkv);
    l.w_dtype = a.w_dtype;
    l.w_layout = WeightLayout::kn;
    l.ldw = R;
    l.y = qa + h * Dl;
    l.ldy = H * Dl;
    l.m = t, l.n = R, l.k = Dn;
    linear(l);
    for (int64_t i = 0; i < t; ++i)
      std::memcpy(qa + (i * H + h) * Dl + R, a.q + h * a.q_head_stride + i * (Dn + Dr) + Dn,
                  static_cast<size_t>(Dr) * sizeof(float));
  }
  });
  at.k_cache = const_cast<float*>(a.cache);
  at.v_cache = at.k_cache;  // V = the first R floats of the row
  at.k_row_stride = Dl;
  at.v_row_stride = Dl;
  at.slots = a.slots;
  at.q = qa;
  at.out = ol;
  at.hq = H, at.hkv = 1, at.dqk = Dl, at.dv = R;
  attention(at);
  parallel_for_ranges(nt, H, 1, [&](int64_t h0, int64_t h1) {
  for (int64_t h = h0; h < h1; ++h) {  // out_h = W_v[h] · o_h  (W_v[h] is [Dv, R]: nk)
    LinearArgs l;
    l.x = ol + h * R;
    l.lda = H * R;
    l.w = w_rows(a, h * Dkv + Dn);
    l.w_dtype = a.w_dtype;
    l.ldw = R;
    l.y = a.out + h * Dv;
    l.ldy = H * Dv;
    l.m = t, l.n = Dv, l.k = R;
    linear(l);
  }
  });
}

// Expanded: the context's rows gathered once, then per group of heads K/V from one GEMM.
void expanded(const MlaArgs& a, const AttentionArgs& at) {
  const int64_t t = a.t, ctx = a.ctx, H = a.H, R = a.R, Dr = a.Dr, Dn = a.Dn, Dv = a.Dv;
  const int64_t Dl = R + Dr, Dkv = Dn + Dv, group = expand_group(a);
  float* rows = a.scratch;              // [ctx, R]
  float* ex = rows + ctx * R;           // [ctx, group·Dkv]
  float* kx = ex + ctx * group * Dkv;   // [ctx, group·(Dn+Dr)]
  float* vx = kx + ctx * group * (Dn + Dr);  // [ctx, group·Dv]
  float* ox = vx + ctx * group * Dv;    // [t, group, Dv]
  for (int64_t j = 0; j < ctx; ++j)
    std::memcpy(rows + j * R, a.cache + int64_t{a.slots[j]} * Dl, static_cast<size_t>(R) * sizeof(float));
  std::vector<int32_t> dense(static_cast<size_t>(ctx));
  for (int64_t j = 0; j < ctx; ++j) dense[j] = static_cast<int32_t>(j);
  for (int64_t h0 = 0; h0 < H; h0 += group) {
    const int64_t g = std::min(group, H - h0);
    LinearArgs l;
    l.x = rows;
    l.w = w_rows(a, h0 * Dkv);
    l.w_dtype = a.w_dtype;
    l.ldw = R;
    l.y = ex;
    l.m = ctx, l.n = g * Dkv, l.k = R;
    linear(l);
    for (int64_t j = 0; j < ctx; ++j) {
      const float* e = ex + j * g * Dkv;
      const float* kr = a.cache + int64_t{a.slots[j]} * Dl + R;
      for (int64_t h = 0; h < g; ++h) {
        float* k = kx + (j * g + h) * (Dn + Dr);
        std::memcpy(k, e + h * Dkv, static_cast<size_t>(Dn) * sizeof(float));
        std::memcpy(k + Dn, kr, static_cast<size_t>(Dr) * sizeof(float));
        std::memcpy(vx + (j * g + h) * Dv, e + h * Dkv + Dn, static_cast<size_t>(Dv) * sizeof(float));
      }
    }
    AttentionArgs b = at;
    b.num_slots = ctx;
    b.slots = dense.data();
    b.k_cache = kx;
    b.v_cache = vx;
    b.q = a.q + h0 * a.q_head_stride;
    b.q_token_stride = Dn + Dr;
    b.q_head_stride = a.q_head_stride;
    b.out = ox;
    b.hq = g, b.hkv = g, b.dqk = Dn + Dr, b.dv = Dv;
    attention(b);
    for (int64_t i = 0; i < t; ++i)
      std::memcpy(a.out + (i * H + h0) * Dv, ox + i * g * Dv, static_cast<size_t>(g * Dv) * sizeof(float));
  }
}

}  // namespace

bool mla_expands(const MlaArgs& a) {
  return a.t > 1 && a.t * (2 * a.R + a.Dr - a.Dn - a.Dr - a.Dv) > (a.Dn + a.Dv) * a.R;
}

int64_t mla_scratch_floats(const MlaArgs& a) {
  if (!mla_expands(a)) return a.t * a.H * (a.R + a.Dr) + a.t * a.H * a.R;
  const int64_t g = expand_group(a);
  return a.ctx * a.R + a.ctx * g * ((a.Dn + a.Dv) + (a.Dn + a.Dr) + a.Dv) + a.t * g * a.Dv;
}

void mla_attention(const MlaArgs& a) {
  if (a.t == 0) return;
  AttentionArgs at;
  at.num_slots = a.num_slots;
  at.ctx_len = a.ctx;
  at.t = a.t;
  at.scale = a.scale;
  if (mla_expands(a)) expanded(a, at);
  else absorbed(a, at);
}

void mla_write_latent(const float* lat, const float* rot, int64_t t, int64_t R, int64_t Dr, const int32_t* slots,
                      float* cache, uint16_t* cache_bf16) {
  const int64_t Dl = R + Dr;
  for (int64_t i = 0; i < t; ++i) {
    const float* lat_row = lat + i * R;
    const float* rot_row = rot + i * Dr;
    if (!cache) {
      uint16_t* row = cache_bf16 + int64_t{slots[i]} * Dl;
      for (int64_t e = 0; e < R; ++e) row[e] = f32_to_bf16(lat_row[e]);
      for (int64_t e = 0; e < Dr; ++e) row[R + e] = f32_to_bf16(rot_row[e]);
      continue;
    }
    float* row = cache + int64_t{slots[i]} * Dl;
    std::memcpy(row, lat_row, static_cast<size_t>(R) * sizeof(float));
    std::memcpy(row + R, rot_row, static_cast<size_t>(Dr) * sizeof(float));
  }
}

void mla_widen_rows(const uint16_t* cache_bf16, const int32_t* slots, int64_t n, int64_t Dl, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    const uint16_t* src = cache_bf16 + int64_t{slots[j]} * Dl;
    for (int64_t e = 0; e < Dl; ++e) out[j * Dl + e] = bf16_to_f32(src[e]);
  }
}

}  // namespace fuselm::kernels
