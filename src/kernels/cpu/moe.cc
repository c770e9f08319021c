#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include <omp.h>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/threading.h"

namespace fuselm::kernels {
namespace {

float act_of(ExpertsAct act, float v) {
  switch (act) {
    case ExpertsAct::silu: return v / (1.0f + std::exp(-v));
    case ExpertsAct::gelu: return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
    case ExpertsAct::gelu_tanh: {
      const float u = 0.79788456080286536f * (v + 0.044715f * v * v * v);
      return 0.5f * v * (1.0f + std::tanh(u));
    }
    case ExpertsAct::relu: return v > 0.0f ? v : 0.0f;
    case ExpertsAct::relu2: return v > 0.0f ? v * v : 0.0f;
  }
  return v;
}

// g [rows, n_up] -> out [rows, i]
void apply_gate(const ExpertsArgs& a, const float* g, float* out, int64_t rows) {
  const int64_t i = a.i, n_up = a.gate == ExpertsGate::act_only ? i : 2 * i;
  const bool vector_act = a.act == ExpertsAct::silu || a.act == ExpertsAct::gelu || a.act == ExpertsAct::gelu_tanh;
  if (a.gate == ExpertsGate::act_mul && !a.interleaved && vector_act) {
    const Act act = a.act == ExpertsAct::silu ? Act::silu : a.act == ExpertsAct::gelu ? Act::gelu : Act::gelu_tanh;
    act_and_mul(act, g, n_up, g + i, n_up, out, i, rows, i);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = g + r * n_up;
    float* o = out + r * i;
    for (int64_t j = 0; j < i; ++j) {
      const float gv = a.interleaved ? row[2 * j] : row[j];
      const float uv = a.gate == ExpertsGate::act_only ? row[j] : a.interleaved ? row[2 * j + 1] : row[i + j];
      switch (a.gate) {
        case ExpertsGate::act_only: o[j] = act_of(a.act, uv); break;
        case ExpertsGate::act_mul: o[j] = act_of(a.act, gv) * uv; break;
        case ExpertsGate::clamped_act_mul:
          o[j] = act_of(a.act, std::min(gv, a.limit)) * std::clamp(uv, -a.limit, a.limit);
          break;
        case ExpertsGate::clamped_swiglu: {
          const float gc = std::min(gv, a.limit);
          const float uc = std::clamp(uv, -a.limit, a.limit);
          o[j] = (uc + 1.0f) * gc / (1.0f + std::exp(-a.alpha * gc));
          break;
        }
      }
    }
  }
}

// One expert over its `rows` gathered pairs: rows of x listed by `pairs` (token·k + slot), results
// written to slot_out[pair].
void run_expert(const ExpertsArgs& a, int64_t ex, const int64_t* pairs, int64_t rows, float* slot_out) {
  const int64_t n_up = a.gate == ExpertsGate::act_only ? a.i : 2 * a.i;
  const size_t es = static_cast<size_t>(dtype_size(a.w_dtype));
  float* xs = thread_scratch(5, static_cast<size_t>(rows * a.h));
  float* gs = thread_scratch(6, static_cast<size_t>(rows * n_up));
  float* as = thread_scratch(7, static_cast<size_t>(rows * a.i));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(a.x + (pairs[r] / a.k) * a.h, a.h, xs + r * a.h);
  LinearArgs up;
  up.x = xs;
  up.w = static_cast<const char*>(a.gate_up) + static_cast<size_t>(ex * n_up * a.h) * es;
  up.w_dtype = a.w_dtype;
  up.w_layout = a.layout;
  up.bias = a.gate_up_bias ? a.gate_up_bias + ex * n_up : nullptr;
  up.y = gs;
  up.m = rows;
  up.n = n_up;
  up.k = a.h;
  linear(up);
  apply_gate(a, gs, as, rows);
  // The down projection reuses xs for its output (the inputs are no longer needed).
  LinearArgs dn;
  dn.x = as;
  dn.w = static_cast<const char*>(a.down) + static_cast<size_t>(ex * a.h * a.i) * es;
  dn.w_dtype = a.w_dtype;
  dn.w_layout = a.layout;
  dn.bias = a.down_bias ? a.down_bias + ex * a.h : nullptr;
  dn.y = xs;
  dn.m = rows;
  dn.n = a.h;
  dn.k = a.i;
  linear(dn);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(xs + r * a.h, a.h, slot_out + pairs[r] * a.h);
}

void plain_linear(const void* w, DType d, const float* x, float* y, int64_t m, int64_t n, int64_t k, int64_t ldy) {
  LinearArgs l;
  l.x = x;
  l.w = w;
  l.w_dtype = d;
  l.y = y;
  l.ldy = ldy;
  l.m = m;
  l.n = n;
  l.k = k;
  linear(l);
}

// y[r] += s_r · shared(x[r]) over the whole batch (threaded GEMMs).
void add_shared(const ExpertsArgs& a, std::vector<float>& gu, std::vector<float>& act, std::vector<float>& scale) {
  const int64_t si = a.shared_i;
  const bool glu = a.shared_gate != nullptr;
  gu.resize(static_cast<size_t>(a.t * 2 * si));
  act.resize(static_cast<size_t>(a.t * std::max(si, a.h)));
  // gu rows are [gate | up] (up alone without a gate), as act_and_mul reads them.
  if (glu) plain_linear(a.shared_gate, a.shared_dtype, a.x, gu.data(), a.t, si, a.h, 2 * si);
  plain_linear(a.shared_up, a.shared_dtype, a.x, gu.data() + (glu ? si : 0), a.t, si, a.h, 2 * si);
  ExpertsArgs g = a;
  g.i = si;
  g.act = a.shared_act;
  g.interleaved = false;
  if (glu) {
    g.gate = ExpertsGate::act_mul;
    apply_gate(g, gu.data(), act.data(), a.t);
  } else {
    g.gate = ExpertsGate::act_only;
    for (int64_t r = 0; r < a.t; ++r)
      for (int64_t j = 0; j < si; ++j) act[r * si + j] = act_of(a.shared_act, gu[r * 2 * si + j]);
  }
  // The down projection reuses gu for its output.
  gu.resize(static_cast<size_t>(a.t * std::max(2 * si, a.h)));
  plain_linear(a.shared_down, a.shared_dtype, act.data(), gu.data(), a.t, a.h, si, a.h);
  scale.assign(static_cast<size_t>(a.t), 1.0f);
  if (a.shared_scale) {
    plain_linear(a.shared_scale, a.shared_dtype, a.x, scale.data(), a.t, 1, a.h, 1);
    for (auto& v : scale) v = 1.0f / (1.0f + std::exp(-v));
  }
  for (int64_t r = 0; r < a.t; ++r)
    for (int64_t c = 0; c < a.h; ++c) a.y[r * a.h + c] += scale[r] * gu[r * a.h + c];
}

}  // namespace

void experts(const ExpertsArgs& a) {
  if (!a.x || !a.ids || !a.weights || !a.gate_up || !a.down || !a.y)
    throw std::invalid_argument("experts: null pointer argument");
  if (a.t < 0 || a.k <= 0 || a.h <= 0 || a.i <= 0 || a.e <= 0)
    throw std::invalid_argument("experts: sizes must be positive");
  const int64_t pairs_n = a.t * a.k;
  // Counting sort of the (token, slot) pairs by expert, stable in pair order.
  // The calling thread's buffers, kept between calls so that decode steps do not allocate.
  // (Named through references: inside the parallel region a thread_local name would be each
  // worker's own, empty, copy.)
  struct Buffers {
    std::vector<int64_t> start, order, fill, active;
    std::vector<float> slot_out, shared_gu, shared_a, shared_scale;
  };
  thread_local Buffers caller;
  auto& start = caller.start;
  auto& order = caller.order;
  auto& fill = caller.fill;
  auto& active = caller.active;
  auto& slot_out = caller.slot_out;
  start.assign(static_cast<size_t>(a.e + 1), 0);
  order.resize(static_cast<size_t>(pairs_n));
  for (int64_t p = 0; p < pairs_n; ++p)
    if (a.ids[p] >= 0 && a.ids[p] < a.e) ++start[a.ids[p] + 1];
  for (int64_t ex = 0; ex < a.e; ++ex) start[ex + 1] += start[ex];
  fill.assign(start.begin(), start.end() - 1);
  for (int64_t p = 0; p < pairs_n; ++p)
    if (a.ids[p] >= 0 && a.ids[p] < a.e) order[fill[a.ids[p]]++] = p;
  active.clear();
  for (int64_t ex = 0; ex < a.e; ++ex)
    if (start[ex + 1] > start[ex]) active.push_back(ex);

  slot_out.resize(static_cast<size_t>(pairs_n * a.h));  // every row an active pair reads is written
  const auto n_active = static_cast<int64_t>(active.size());
  // Threads take whole experts (one single-threaded GEMM pair each) unless a few experts hold many
  // rows: threaded GEMMs over a handful of rows lose to their own fork/join and packing (4x
  // slower measured at 16 rows per expert), but one thread per expert leaves cores idle when
  // there are fewer experts than threads.
  const int max_threads = std::max(1, omp_get_max_threads());
  const bool by_expert = n_active >= 2 * max_threads || pairs_n <= 32 * n_active;
  const int nt = by_expert ? kernel_threads(n_active, 1) : 1;
  // Largest experts first, so that dynamic scheduling ends with the small ones.
  std::stable_sort(active.begin(), active.end(),
                   [&](int64_t a, int64_t b) { return start[a + 1] - start[a] > start[b + 1] - start[b]; });
  parallel_for_dynamic(nt, n_active, [&](int64_t j) {
    const int64_t ex = active[j];
    run_expert(a, ex, order.data() + start[ex], start[ex + 1] - start[ex], slot_out.data());
  });
  for (int64_t r = 0; r < a.t; ++r) {
    float* y = a.y + r * a.h;
    std::fill_n(y, a.h, 0.0f);
    for (int64_t s = 0; s < a.k; ++s) {
      const int64_t p = r * a.k + s;
      if (a.ids[p] < 0 || a.ids[p] >= a.e) continue;
      const float w = a.weights[p];
      const float* o = slot_out.data() + p * a.h;
      for (int64_t c = 0; c < a.h; ++c) y[c] += w * o[c];
    }
  }
  if (a.shared_up) add_shared(a, caller.shared_gu, caller.shared_a, caller.shared_scale);
}

}  // namespace fuselm::kernels
