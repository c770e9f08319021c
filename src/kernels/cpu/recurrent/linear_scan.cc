// The diagonal linear scan (recurrent.h): each (sequence, block of channels) is one work item, its
// new tokens run in order by the ISA's linear_rows body with the block's h in registers. No chunked
// form: a step is one fused multiply-add per channel, so the scan is bound by reading a and b
// once, which the sequential pass already does.
#include <algorithm>
#include <stdexcept>

#include "kernels/cpu/recurrent/recurrent.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#include "kernels/cpu/recurrent/recurrent_impl.h"

namespace fuselm::kernels {
namespace {

// Channels per work item: a few register blocks, so a long prompt splits over threads by channels.
constexpr int64_t kBlock = 256;
// Work a thread must get before a call splits (as the other recurrent kernels).
constexpr int64_t kMinWorkPerThread = int64_t{1} << 17;

}  // namespace

void linear_scan(const LinearScanArgs& a, std::span<const RecurrentSeq> seqs) {
  if (!a.a || !a.b || !a.out || a.channels < 1) throw std::invalid_argument("linear_scan: bad arguments");
  for (const auto& s : seqs)
    if (!s.state) throw std::invalid_argument("linear_scan: a sequence has no state");
  const RecurrentKernels& k = recurrent_kernels();
  const int64_t blocks = (a.channels + kBlock - 1) / kBlock, units = static_cast<int64_t>(seqs.size()) * blocks;
  int64_t tokens = 0;
  for (const auto& s : seqs) tokens += s.count;
  const int nt = kernel_threads(tokens * a.channels * 2, kMinWorkPerThread);
  parallel_for_dynamic(nt, units, [&](int64_t i) {
    const RecurrentSeq& s = seqs[i / blocks];
    const int64_t c0 = (i % blocks) * kBlock, n = std::min(a.channels, c0 + kBlock) - c0;
    if (s.fresh) std::fill(s.state + c0, s.state + c0 + n, 0.f);
    k.linear_rows(s.state + c0, a.a + s.first * a.a_t + c0, a.a_t, a.b + s.first * a.b_t + c0, a.b_t,
                  a.out + s.first * a.o_t + c0, a.o_t, s.count, n);
  });
}

}  // namespace fuselm::kernels
