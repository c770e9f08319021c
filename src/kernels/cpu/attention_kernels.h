#pragma once
// Per-ISA kernel table of attention (internal).
#include <cstdint>

#include "kernels/cpu/attention.h"

namespace fuselm::kernels {

struct AttentionKernels {
  /// out row of new token i, q head h (cache already holds the new K/V; strides resolved).
  void (*attend)(const AttentionArgs& a, int64_t i, int64_t h);
};

extern const AttentionKernels kAttentionKernelsGeneric;
extern const AttentionKernels kAttentionKernelsAvx2;
extern const AttentionKernels kAttentionKernelsAvx512;

}  // namespace fuselm::kernels
