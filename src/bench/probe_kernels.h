#pragma once
// Per-ISA loops of the machine probes (internal).
#include <cstddef>
#include <cstdint>

namespace fuselm::bench {

struct ProbeKernels {
  /// Sum of x[0..n) read as 4 interleaved streams / as one stream in memory order.
  float (*stream_sum)(const float* x, size_t n);
  float (*stream_sum_sequential)(const float* x, size_t n);
  /// Runs `iters` iterations of independent FMA chains; returns a value to keep and the flops done.
  float (*fma_chains)(int64_t iters, double* flops);
};

extern const ProbeKernels kProbeKernelsGeneric;

}  // namespace fuselm::bench
