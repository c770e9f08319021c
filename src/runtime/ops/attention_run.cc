// Writes the new K/V rows to their slots, then attends over each token's causal context.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/ops/attention_args.h"

namespace fuselm::runtime::ops {

void run_attention(const AttentionArgs& a) {
  const int64_t T = a.num_tokens, Hq = a.num_q_heads, Hkv = a.num_kv_heads, D = a.head_dim, Dv = a.v_head_dim;
  const int64_t first_pos = a.context_len - T;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t slot = a.slots[first_pos + t];
    for (int64_t h = 0; h < Hkv; ++h) {
      float* kd = a.k_cache + slot * Hkv * D + h * D;
      const float* ks = a.k_new + t * a.k_token_stride + h * a.k_head_stride;
      for (int64_t d = 0; d < D; ++d) kd[d] = ks[d];
      float* vd = a.v_cache + slot * Hkv * Dv + h * Dv;
      const float* vs = a.v_new + t * a.v_token_stride + h * a.v_head_stride;
      for (int64_t d = 0; d < Dv; ++d) vd[d] = vs[d];
    }
  }
  const int64_t group = Hq / Hkv;
#pragma omp parallel
  {
    std::vector<float> scores(a.context_len + 1);
    std::vector<double> acc(Dv);
#pragma omp for collapse(2) schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t pos = first_pos + t;
        const int64_t lo = a.sliding_window > 0 ? std::max<int64_t>(0, pos - a.sliding_window + 1) : 0;
        const float* q = a.q + t * a.q_token_stride + h * a.q_head_stride;
        const int64_t kh = h / group;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = lo; j <= pos; ++j) {
          const float* k = a.k_cache + static_cast<int64_t>(a.slots[j]) * Hkv * D + kh * D;
          float s = 0.f;
          for (int64_t d = 0; d < D; ++d) s += q[d] * k[d];
          s *= a.scale;
          if (a.softcap > 0.f) s = a.softcap * std::tanh(s / a.softcap);
          scores[j - lo] = s;
          m = std::max(m, s);
        }
        if (a.sinks) m = std::max(m, a.sinks[h]);
        double sum = 0;
        for (int64_t j = lo; j <= pos; ++j) sum += (scores[j - lo] = std::exp(scores[j - lo] - m));
        if (a.sinks) sum += std::exp(a.sinks[h] - m);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = lo; j <= pos; ++j) {
          const float* v = a.v_cache + static_cast<int64_t>(a.slots[j]) * Hkv * Dv + kh * Dv;
          const double p = scores[j - lo];
          for (int64_t d = 0; d < Dv; ++d) acc[d] += p * v[d];
        }
        float* o = a.out + (t * Hq + h) * Dv;
        for (int64_t d = 0; d < Dv; ++d) o[d] = static_cast<float>(acc[d] / sum);
      }
    }
  }
}

}  // namespace fuselm::runtime::ops
