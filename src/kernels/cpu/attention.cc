#include "kernels/cpu/attention.h"

#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

#include "kernels/cpu/simd_math.h"
#include "kernels/cpu/attention_impl.h"

namespace fuselm::kernels {

const AttentionKernels kAttentionKernelsGeneric = make_attention_kernels<Isa::generic>();

namespace {

const AttentionKernels& attention_kernels() {
#if FUSELM_X86_ISAS
  const Isa isa = cpu_isa();
  if (isa == Isa::avx512) return kAttentionKernelsAvx512;
  if (isa == Isa::avx2) return kAttentionKernelsAvx2;
#endif
  return kAttentionKernelsGeneric;
}

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("attention: " + what); }

AttentionArgs resolve(const AttentionArgs& in) {
  AttentionArgs a = in;
  if (a.hq <= 0 || a.hkv <= 0 || a.dqk <= 0 || a.dv <= 0)
    fail(fmt::format("heads and head sizes must be positive (hq={} hkv={} dqk={} dv={})", a.hq,
                     a.hkv, a.dqk, a.dv));
  if (a.hq % a.hkv != 0) fail(fmt::format("hq {} is not a multiple of hkv {}", a.hq, a.hkv));
  if (a.t < 0 || a.t > a.ctx_len)
    fail(fmt::format("new tokens t={} must be within the context length {}", a.t, a.ctx_len));
  if (a.t == 0) return a;
  if (!a.q || !a.out || !a.k_cache || !a.v_cache || !a.slots) fail("null q, out, cache or slots");
  if ((a.k == nullptr) != (a.v == nullptr)) fail("k and v must both be given or both be null");
  if (a.num_slots <= 0) fail(fmt::format("num_slots {} must be positive", a.num_slots));
  if (a.q_head_stride == 0) a.q_head_stride = a.dqk;
  if (a.q_token_stride == 0) a.q_token_stride = a.hq * a.q_head_stride;
  if (a.k_head_stride == 0) a.k_head_stride = a.dqk;
  if (a.k_token_stride == 0) a.k_token_stride = a.hkv * a.k_head_stride;
  if (a.v_head_stride == 0) a.v_head_stride = a.dv;
  if (a.v_token_stride == 0) a.v_token_stride = a.hkv * a.v_head_stride;
  for (int64_t j = 0; j < a.ctx_len; ++j)
    if (a.slots[j] < 0 || a.slots[j] >= a.num_slots)
      fail(fmt::format("slot {} of context position {} is outside [0, {})", a.slots[j], j,
                       a.num_slots));
  return a;
}

void copy_row(float* dst, const float* src, int64_t n) {
  if (dst != src) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace

void attention(const AttentionArgs& args) {
  const AttentionArgs a = resolve(args);
  if (a.t == 0) return;
  const AttentionKernels& kern = attention_kernels();

  // work: keys visited · (dqk + dv) over all (token, head) pairs
  int64_t work = 0;
  for (int64_t i = 0; i < a.t; ++i) {
    const int64_t pos = a.ctx_len - a.t + i;
    const int64_t keys = a.sliding_window > 0 ? std::min(pos + 1, a.sliding_window) : pos + 1;
    work += keys;
  }
  work *= a.hq * (a.dqk + a.dv);
  const int64_t pairs = a.t * a.hq;
  const int nt = static_cast<int>(std::min<int64_t>(kernel_threads(work, int64_t{1} << 15), pairs));
  const int64_t writes = a.k ? a.t * a.hkv : 0;
  const int64_t k_row = a.hkv * a.dqk, v_row = a.hkv * a.dv;
  const int64_t first = a.ctx_len - a.t;

#pragma omp parallel num_threads(nt) if (nt > 1)
  {
#pragma omp for schedule(static)
    for (int64_t w = 0; w < writes; ++w) {
      const int64_t i = w / a.hkv, h = w % a.hkv;
      const int64_t slot = a.slots[first + i];
      copy_row(a.k_cache + slot * k_row + h * a.dqk, a.k + i * a.k_token_stride + h * a.k_head_stride,
               a.dqk);
      copy_row(a.v_cache + slot * v_row + h * a.dv, a.v + i * a.v_token_stride + h * a.v_head_stride,
               a.dv);
    }
    // (implicit barrier: every new K/V is in the cache before any token reads it)
#pragma omp for schedule(dynamic, 1)
    for (int64_t pr = pairs - 1; pr >= 0; --pr)  // latest tokens (most keys) first
      kern.attend(a, pr / a.hq, pr % a.hq);
  }
}

}  // namespace fuselm::kernels
