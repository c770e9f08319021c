#pragma once
// Per-ISA loops of the machine probes (internal).
#include <cstddef>
#include <cstdint>

namespace fuselm::bench {

struct ProbeKernels {
  float (*stream_sum)(const float* x, size_t n);
  /// Runs `iters` iterations of independent FMA chains; returns a value to keep and the flops done.
  float (*fma_chains)(int64_t iters, double* flops);
};

extern const ProbeKernels kProbeKernelsGeneric;
extern const ProbeKernels kProbeKernelsAvx2;
extern const ProbeKernels kProbeKernelsAvx512;

}  // namespace fuselm::bench
