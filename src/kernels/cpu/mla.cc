#include "kernels/cpu/mla.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/threading.h"

namespace fuselm::kernels {
namespace {

constexpr int64_t kQ8Block = 32, kQ8BlockBytes = 34;  // ggml's block_q8_0
int64_t q8_blocks(int64_t n) { return (n + kQ8Block - 1) / kQ8Block; }

// The latent's width in the absorbed q' rows: R, or for q8_0 its whole blocks (zeros past R), so
// that the rope key starts where the row's rope blocks do.
int64_t latent_span(const MlaArgs& a) {
  return a.cache_type == MlaCacheType::q8_0 ? q8_blocks(a.R) * kQ8Block : a.R;
}

// Cache row of `slot` as R + Dr floats [latent | rope key] into out (the expanded form's GEMM
// input and rope keys): copied, widened from bf16, or each q8_0 block's values (ggml's
// dequantize_row_q8_0) up to the part's width.
void widen_row(const MlaArgs& a, int64_t slot, float* out) {
  const int64_t Dl = a.R + a.Dr;
  if (a.cache_type == MlaCacheType::f32) {
    std::memcpy(out, static_cast<const float*>(a.cache) + slot * Dl, static_cast<size_t>(Dl) * sizeof(float));
    return;
  }
  if (a.cache_type == MlaCacheType::bf16) {
    const uint16_t* src = static_cast<const uint16_t*>(a.cache) + slot * Dl;
    for (int64_t e = 0; e < Dl; ++e) out[e] = bf16_to_f32(src[e]);
    return;
  }
  const uint8_t* blk = static_cast<const uint8_t*>(a.cache) + slot * mla_q8_row_blocks(a.R, a.Dr) * kQ8BlockBytes;
  auto part = [&](int64_t n, float* dst) {
    for (int64_t b = 0; b < q8_blocks(n); ++b, blk += kQ8BlockBytes) {
      float v[kQ8Block];
      dequantize_row(QuantType::q8_0, blk, v, kQ8Block);
      std::copy_n(v, std::min(kQ8Block, n - b * kQ8Block), dst + b * kQ8Block);
    }
  };
  part(a.R, out);
  part(a.Dr, out + a.R);
}

// n values quantized into ceil(n/32) q8_0 blocks at dst, the last padded with zeros.
void quantize_padded(const float* src, int64_t n, uint8_t* dst) {
  const int64_t whole = n / kQ8Block * kQ8Block;
  if (whole > 0) quantize_row(QuantType::q8_0, src, dst, whole);
  if (whole == n) return;
  float pad[kQ8Block] = {};
  std::copy(src + whole, src + n, pad);
  quantize_row(QuantType::q8_0, pad, dst + whole / kQ8Block * kQ8BlockBytes, kQ8Block);
}

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
  const int64_t Rs = latent_span(a), Dl = Rs + Dr, Dkv = Dn + Dv;
  float* qa = a.scratch;          // [t, H, Dl]: [q_nope·W_k (R) | zeros (Rs - R) | q_rot (Dr)]
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
    for (int64_t i = 0; i < t; ++i) {
      float* row = qa + (i * H + h) * Dl;
      std::fill(row + R, row + Rs, 0.f);
      std::memcpy(row + Rs, a.q + h * a.q_head_stride + i * (Dn + Dr) + Dn, static_cast<size_t>(Dr) * sizeof(float));
    }
  }
  });
  at.k_cache = const_cast<void*>(a.cache);
  at.v_cache = at.k_cache;  // V = the first R values of the row
  at.cache_bf16 = a.cache_type == MlaCacheType::bf16;
  at.cache_q8_0 = a.cache_type == MlaCacheType::q8_0;
  at.k_row_stride = at.cache_q8_0 ? mla_q8_row_blocks(R, Dr) : Dl;  // (q8_0: blocks)
  at.v_row_stride = at.k_row_stride;
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
  float* ropes = rows + ctx * R;        // [ctx, Dr]
  float* row = ropes + ctx * Dr;        // [R + Dr]: one cache row in fp32
  float* ex = row + Dl;                 // [ctx, group·Dkv]
  float* kx = ex + ctx * group * Dkv;   // [ctx, group·(Dn+Dr)]
  float* vx = kx + ctx * group * (Dn + Dr);  // [ctx, group·Dv]
  float* ox = vx + ctx * group * Dv;    // [t, group, Dv]
  for (int64_t j = 0; j < ctx; ++j) {
    widen_row(a, a.slots[j], row);
    std::memcpy(rows + j * R, row, static_cast<size_t>(R) * sizeof(float));
    std::memcpy(ropes + j * Dr, row + R, static_cast<size_t>(Dr) * sizeof(float));
  }
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
      const float* kr = ropes + j * Dr;
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

int64_t mla_q8_row_blocks(int64_t R, int64_t Dr) { return q8_blocks(R) + q8_blocks(Dr); }

int64_t mla_scratch_floats(const MlaArgs& a) {
  if (!mla_expands(a)) return a.t * a.H * (latent_span(a) + a.Dr) + a.t * a.H * a.R;
  const int64_t g = expand_group(a);
  return a.ctx * (a.R + a.Dr) + (a.R + a.Dr) + a.ctx * g * ((a.Dn + a.Dv) + (a.Dn + a.Dr) + a.Dv) + a.t * g * a.Dv;
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
                      void* cache, MlaCacheType type) {
  const int64_t Dl = R + Dr;
  for (int64_t i = 0; i < t; ++i) {
    const float* lat_row = lat + i * R;
    const float* rot_row = rot + i * Dr;
    const int64_t slot = slots[i];
    if (type == MlaCacheType::q8_0) {
      uint8_t* row = static_cast<uint8_t*>(cache) + slot * mla_q8_row_blocks(R, Dr) * kQ8BlockBytes;
      quantize_padded(lat_row, R, row);
      quantize_padded(rot_row, Dr, row + q8_blocks(R) * kQ8BlockBytes);
    } else if (type == MlaCacheType::bf16) {
      uint16_t* row = static_cast<uint16_t*>(cache) + slot * Dl;
      for (int64_t e = 0; e < R; ++e) row[e] = f32_to_bf16(lat_row[e]);
      for (int64_t e = 0; e < Dr; ++e) row[R + e] = f32_to_bf16(rot_row[e]);
    } else {
      float* row = static_cast<float*>(cache) + slot * Dl;
      std::memcpy(row, lat_row, static_cast<size_t>(R) * sizeof(float));
      std::memcpy(row + R, rot_row, static_cast<size_t>(Dr) * sizeof(float));
    }
  }
}

}  // namespace fuselm::kernels
