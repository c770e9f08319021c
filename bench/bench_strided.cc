// bench_strided: the generic ATen kernels of pp512 on the default model's shapes (a residual add and
// a rope-sized multiply, [512, 576] fp32), and the vectorised silu and an empty pool task for
// reference, at 1 and 2 threads: the best and mean time of each, so that what splitting these walks
// over the thread pool gains (a quiet machine) or costs (a loaded one) is one run.
//
// Usage: bench_strided [--repeats R]
// Figures depend on the machine's load: the best time shows what two free cores give.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/threading.h"

namespace {

using fuselm::kernels::Strided;

Strided matrix(float* data, int64_t rows, int64_t cols) {
  Strided v;
  v.data = data;
  v.ndim = 2;
  v.shape[0] = rows;
  v.shape[1] = cols;
  v.strides[0] = cols;
  v.strides[1] = 1;
  return v;
}

template <class F>
void time_it(const char* what, int threads, int repeats, F f) {
  double best = 1e30, sum = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, us);
    sum += us;
  }
  std::printf("| %-28s | %7d | %9.1f | %9.1f |\n", what, threads, best, sum / repeats);
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 2000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::max(1, std::stoi(argv[i + 1]));
  const int64_t R = 512, C = 576;
  std::vector<float> a(R * C, 1.5f), b(R * C, 0.25f), o(R * C);
  const Strided va = matrix(a.data(), R, C), vb = matrix(b.data(), R, C), vo = matrix(o.data(), R, C);
  std::printf("| %-28s | threads | best (us) | mean (us) |\n|---|---|---|---|\n", "kernel");
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    time_it("binary add [512, 576]", t, repeats, [&] { fuselm::kernels::binary(fuselm::kernels::BinaryFn::add, 1.0, va, vb, vo); });
    time_it("binary mul [512, 576]", t, repeats, [&] { fuselm::kernels::binary(fuselm::kernels::BinaryFn::mul, 1.0, va, vb, vo); });
    time_it("silu (activation.h)", t, repeats, [&] { fuselm::kernels::unary_silu_f32(a.data(), o.data(), R * C); });
    time_it("empty pool task", t, repeats, [&] { fuselm::kernels::parallel_run(t, [](int, int) {}); });
  }
  return 0;
}
