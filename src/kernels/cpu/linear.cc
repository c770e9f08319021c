#include "kernels/cpu/linear.h"

#include "base/large_alloc.h"

#include <cstdlib>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"
#include "kernels/cpu/tuning.h"

#include "kernels/cpu/linear_impl.h"
#include "isa/linear_tables.inc"

namespace fuselm::kernels {

const LinearKernels kLinearKernelsGeneric = make_linear_kernels<Isa::generic>();

namespace {

const char* nk_name(WeightLayout l) { return l == WeightLayout::nk ? "nk" : "kn"; }

LinearProblem resolve(const LinearArgs& a) {
  if (a.m < 0 || a.n < 0 || a.k < 0)
    throw std::invalid_argument(fmt::format("linear: negative size m={} n={} k={}", a.m, a.n, a.k));
  const bool nk = a.w_layout == WeightLayout::nk;
  LinearProblem p{a.x,    a.lda, a.w,   a.w_dtype, a.w_layout, a.ldw,
                  a.bias, a.y,   a.ldy, a.m,       a.n,        a.k, a.packed, cpu_tuning().gemv_memory_order,
                  cpu_tuning().gemv_prefetch, cpu_tuning().gemv_streams};
  if (p.lda == 0) p.lda = a.k;
  if (p.ldy == 0) p.ldy = a.n;
  if (p.ldw == 0) p.ldw = nk ? a.k : a.n;
  if (p.lda < a.k) throw std::invalid_argument(fmt::format("linear: lda {} < k {}", p.lda, a.k));
  if (p.ldy < a.n) throw std::invalid_argument(fmt::format("linear: ldy {} < n {}", p.ldy, a.n));
  if (p.ldw < (nk ? a.k : a.n))
    throw std::invalid_argument(fmt::format("linear: ldw {} < {} {} for the {} layout", p.ldw,
                                            nk ? "k" : "n", nk ? a.k : a.n, nk ? "nk" : "kn"));
  if (a.m > 0 && a.n > 0 && !a.y) throw std::invalid_argument("linear: y is null");
  if (a.m > 0 && a.n > 0 && a.k > 0 && (!a.x || !a.w))
    throw std::invalid_argument("linear: x or w is null");
  if (a.packed && !a.packed->fits(a.n, a.k, a.w_layout))
    throw std::invalid_argument(fmt::format("linear: packed weights are n={} k={} {}, the problem n={} k={} {}",
                                            a.packed->n(), a.packed->k(), nk_name(a.packed->layout()), a.n,
                                            a.k, nk_name(a.w_layout)));
  if (a.packed && a.packed->dtype() != a.w_dtype)
    throw std::invalid_argument(fmt::format("linear: packed weights are {}, the weights {}",
                                            dtype_name(a.packed->dtype()), dtype_name(a.w_dtype)));
  return p;
}

// Tiles [u0, u1) of linear()'s balanced split: tile u is panel u / nt, rows of slice u % nt
// (`rows` each). Runs of tiles are merged: a head of row slices of one panel, whole panels, a
// tail of row slices.
void gemm_tiles(const LinearKernels& kern, const LinearProblem& p, int64_t nt, int64_t rows, int64_t u0,
                int64_t u1) {
  auto row = [&](int64_t r) { return std::min(p.m, r * rows); };
  auto col = [&](int64_t panel) { return std::min(p.n, panel * kern.gemm_nr); };
  auto run = [&](int64_t panel0, int64_t panel1, int64_t r0, int64_t r1) {
    if (row(r0) < row(r1)) kern.gemm(p, row(r0), row(r1), col(panel0), col(panel1));
  };
  int64_t u = u0;
  if (u % nt != 0) {  // head: the rest of a panel's row slices
    const int64_t panel = u / nt, r1 = std::min(nt, u1 - panel * nt);
    run(panel, panel + 1, u % nt, r1);
    u = panel * nt + r1;
  }
  if (u / nt < u1 / nt) {  // whole panels
    run(u / nt, u1 / nt, 0, nt);
    u = u1 / nt * nt;
  }
  if (u < u1) run(u / nt, u / nt + 1, 0, u1 - u);  // tail: a panel's first row slices
}

}  // namespace

void linear(const LinearArgs& args) {
  const LinearProblem p = resolve(args);
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) {
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) p.y[i * p.ldy + j] = p.bias ? p.bias[j] : 0.f;
    return;
  }
  const LinearKernels& kern = isa_kernels<LinearKernels>();
  const int64_t work = p.m * p.n * p.k;  // multiply-adds
  if (p.m <= kGemvRows) {
    // Decode: split output columns; each thread streams its share of W once. A thread's share
    // should outweigh waking it (~1-2 us): 16K multiply-adds stream >= 32 KB of bf16 weights.
    const int nt = kernel_threads(p.n * p.k, int64_t{1} << 14);
    // Four parts per thread, taken as threads come free: on a shared host one core often runs
    // slower or starts late, and with one fixed half each the other thread idled at the join
    // (perf, SmolLM2 BF16 decode, 2 threads: 6-8 % of samples waiting, 2.5-3 % with parts).
    parallel_for_chunks(nt, p.n, /*align=*/16, linear_parts(nt, p.m), [&](int64_t n0, int64_t n1) { kern.gemv(p, n0, n1); });
    return;
  }
  const int nt = kernel_threads(work, int64_t{1} << 16);
  const int64_t panels = (p.n + kern.gemm_nr - 1) / kern.gemm_nr;
  if (nt == 1 || (p.n >= 2 * kern.gemm_nr * nt && panels % nt == 0)) {
    // Split columns on whole panels: each thread packs (or reads packed) only its own panels of W.
    parallel_for_ranges(nt, p.n, /*align=*/kern.gemm_nr,
                        [&](int64_t n0, int64_t n1) { kern.gemm(p, 0, p.m, n0, n1); });
  } else if (p.n >= 2 * kern.gemm_nr * nt) {
    // Panels that do not divide among the threads (SmolLM2's 576 columns: 9 panels, 5 against 4
    // on 2 threads, 10 % of the GEMM's time idle): the panels x nt tiles of (panel, row slice),
    // panel-major, an equal run of tiles per thread, so a thread shares at most two panels.
    const int64_t slice = (p.m + nt - 1) / nt;
    const int64_t rows = (slice + kern.gemm_mr - 1) / kern.gemm_mr * kern.gemm_mr;
    parallel_for_ranges(nt, panels * nt, 1, [&](int64_t u0, int64_t u1) { gemm_tiles(kern, p, nt, rows, u0, u1); });
  } else {
    // Narrow output: split rows; each thread packs all of W (cheap, since n is small).
    parallel_for_ranges(nt, p.m, kern.gemm_mr,
                        [&](int64_t m0, int64_t m1) { kern.gemm(p, m0, m1, 0, p.n); });
  }
}

void PackedLinearWeights::Free::operator()(uint32_t* p) const { free_large(p, bytes); }

std::unique_ptr<PackedLinearWeights> PackedLinearWeights::pack(const void* w, DType w_dtype,
                                                               WeightLayout layout, int64_t ldw,
                                                               int64_t n, int64_t k) {
  const LinearKernels& kern = isa_kernels<LinearKernels>();
  const bool bf16 = w_dtype == DType::bf16 && kern.pack_bf16, f32 = w_dtype == DType::f32 && kern.pack_f32;
  if (!(bf16 || f32) || n <= 0 || k <= 0) return nullptr;
  LinearArgs a{.x = nullptr, .w = w, .w_dtype = w_dtype, .w_layout = layout, .ldw = ldw,
               .y = nullptr, .m = 0, .n = n, .k = k};
  const LinearProblem p = resolve(a);
  auto out = std::unique_ptr<PackedLinearWeights>(new PackedLinearWeights);
  out->n_ = n;
  out->k_ = k;
  out->layout_ = layout;
  out->dtype_ = w_dtype;
  out->nr_ = kern.gemm_nr;
  out->panel_words_ = bf16 ? kern.packed_pairs(k) * kern.gemm_nr : k * kern.gemm_nr;
  const size_t bytes = static_cast<size_t>(out->bytes());
  out->data_ = std::unique_ptr<uint32_t, Free>(static_cast<uint32_t*>(allocate_large(bytes)), Free{bytes});
  if (bf16)
    kern.pack_bf16(p, out->data_.get());
  else
    kern.pack_f32(p, reinterpret_cast<float*>(out->data_.get()));
  return out;
}

}  // namespace fuselm::kernels
