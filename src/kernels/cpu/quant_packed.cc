#include "kernels/cpu/quant_packed.h"

#include "base/large_alloc.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_kernels.h"
#include "kernels/cpu/threading.h"

namespace fuselm::kernels {

void QuantPacked::Free::operator()(unsigned char* p) const { free_large(p, bytes); }

QuantPacked QuantPacked::pack(QuantType type, const void* w, int64_t ldw_bytes, int64_t n, int64_t k) {
  if (!packable(type))
    throw std::invalid_argument(
        fmt::format("QuantPacked: no packed layout for {} (q8_0, q4_0 and q4_1 only)", quant_info(type).name));
  const int64_t row_bytes = quant_row_bytes(type, k);
  if (n < 0) throw std::invalid_argument(fmt::format("QuantPacked: n = {}", n));
  if (ldw_bytes == 0) ldw_bytes = row_bytes;
  QuantPacked p;
  p.type_ = type;
  p.n_ = n;
  p.k_ = k;
  const size_t bytes = (static_cast<size_t>(p.bytes()) + 63) & ~size_t{63};
  p.data_ = std::unique_ptr<unsigned char, Free>(static_cast<unsigned char*>(allocate_large(bytes)), Free{bytes});
  std::memset(p.data_.get(), 0, bytes);  // padding rows: zero codes and zero scales
  const auto* src = static_cast<const unsigned char*>(w);
  const int64_t nb = k / 32;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t g = j / 16, l = j % 16;
    for (int64_t b = 0; b < nb; ++b) {
      auto* codes = const_cast<unsigned char*>(p.codes(g, b));
      auto* scales = const_cast<uint16_t*>(p.scales(g, b));
      if (type == QuantType::q8_0) {
        const auto& blk = reinterpret_cast<const BlockQ8_0*>(src + j * ldw_bytes)[b];
        scales[l] = blk.d;
        for (int kg = 0; kg < 8; ++kg) std::memcpy(codes + 64 * kg + 4 * l, blk.qs + 4 * kg, 4);
      } else if (type == QuantType::q4_0) {
        const auto& blk = reinterpret_cast<const BlockQ4_0*>(src + j * ldw_bytes)[b];
        scales[l] = blk.d;
        for (int q = 0; q < 4; ++q) std::memcpy(codes + 64 * q + 4 * l, blk.qs + 4 * q, 4);
      } else {
        const auto& blk = reinterpret_cast<const BlockQ4_1*>(src + j * ldw_bytes)[b];
        scales[l] = blk.d;
        const_cast<uint16_t*>(p.mins(g, b))[l] = blk.m;
        for (int q = 0; q < 4; ++q) std::memcpy(codes + 64 * q + 4 * l, blk.qs + 4 * q, 4);
      }
    }
  }
  return p;
}

void quant_linear_packed(const QuantPacked& w, const float* x, int64_t lda, const float* bias, float* y,
                         int64_t ldy, int64_t m) {
  const int64_t k = w.k(), n = w.n();
  if (lda == 0) lda = k;
  if (ldy == 0) ldy = n;
  if (m < 0 || lda < k || ldy < n)
    throw std::invalid_argument(fmt::format("quant_linear_packed: m {} lda {} ldy {} for k {} n {}", m, lda, ldy, k, n));
  if (m == 0 || n == 0) return;
  if (!y || (k > 0 && !x)) throw std::invalid_argument("quant_linear_packed: x or y is null");
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) y[i * ldy + j] = bias ? bias[j] : 0.f;
    return;
  }
  void* scratch = thread_scratch(4, static_cast<size_t>(q8_acts_bytes(m, k, 32) + 3) / 4);
  const Q8Acts acts = quantize_acts(x, lda, m, k, 32, scratch);
  const PackedProblem p{&w, bias, y, ldy, m};
  const QuantKernels& kern = quant_kernels();
  const int nt = kernel_threads(n * k * (m < 8 ? 1 : m / 8 + 1), int64_t{1} << 14);
  parallel_for_chunks(nt, w.groups(), 1, linear_parts(nt, m), [&](int64_t g0, int64_t g1) { kern.packed(p, acts, g0, g1); });
}

}  // namespace fuselm::kernels
