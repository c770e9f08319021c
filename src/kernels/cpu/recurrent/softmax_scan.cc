// The decayed softmax scan (recurrent.h): one pass over each sequence's tokens per block of
// channels, the block's state held in three rows (num, den, m). Sequential in the tokens (no
// chunked form: its exponents would need a per-chunk maximum of their own); the channel loop is the
// inner one, so a block of channels is one vector pass per token.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cpu/recurrent/recurrent.h"
#include "kernels/cpu/threading.h"

namespace fuselm::kernels {
namespace {

constexpr int64_t kBlock = 64;
// Work a thread must get before a call splits (as the other recurrent kernels).
constexpr int64_t kMinWorkPerThread = int64_t{1} << 17;

/// Tokens [first, first + count) of channels [c0, c1) from and into the state rows.
void scan_block(const SoftmaxScanArgs& a, const RecurrentSeq& s, int64_t c0, int64_t c1) {
  const int64_t C = a.channels;
  float* num = s.state;
  float* den = s.state + C;
  float* mx = s.state + 2 * C;
  if (s.fresh) {
    std::fill(num + c0, num + c1, 0.f);
    std::fill(den + c0, den + c1, 0.f);
    std::fill(mx + c0, mx + c1, kSoftmaxScanFreshMax);
  }
  for (int64_t t = s.first; t < s.first + s.count; ++t) {
    const float* k = a.k + t * a.k_t;
    const float* v = a.v + t * a.v_t;
    float* o = a.out + t * a.o_t;
    for (int64_t c = c0; c < c1; ++c) {
      const float m = mx[c], ku = k[c] + a.u[c];
      // this token's output: the past (in frame m) and the token itself with its bonus u
      const float mo = std::max(m, ku), p = std::exp(m - mo), q = std::exp(ku - mo);
      o[c] = (p * num[c] + q * v[c]) / (p * den[c] + q);
      // the state the next token sees: the past decayed by one step, plus this token
      const float md = m + a.w[c], mn = std::max(md, k[c]), e1 = std::exp(md - mn), e2 = std::exp(k[c] - mn);
      num[c] = e1 * num[c] + e2 * v[c];
      den[c] = e1 * den[c] + e2;
      mx[c] = mn;
    }
  }
}

}  // namespace

void decay_softmax_scan(const SoftmaxScanArgs& a, std::span<const RecurrentSeq> seqs) {
  if (!a.k || !a.v || !a.w || !a.u || !a.out || a.channels < 1)
    throw std::invalid_argument("decay_softmax_scan: bad arguments");
  const int64_t blocks = (a.channels + kBlock - 1) / kBlock, units = static_cast<int64_t>(seqs.size()) * blocks;
  int64_t tokens = 0;
  for (const auto& s : seqs) tokens += s.count;
  const int nt = kernel_threads(tokens * a.channels * 16, kMinWorkPerThread);
  parallel_for_dynamic(nt, units, [&](int64_t i) {
    const int64_t b = i % blocks;
    scan_block(a, seqs[i / blocks], b * kBlock, std::min(a.channels, (b + 1) * kBlock));
  });
}

}  // namespace fuselm::kernels
