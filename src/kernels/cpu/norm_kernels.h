#pragma once
// Per-ISA kernel table of the row normalisations (internal). Each entry handles one row.
#include <cstdint>

namespace fuselm::kernels {

struct NormKernels {
  void (*rms_norm)(const float* x, const float* w, float* y, int64_t width, float eps, float w_offset);
  void (*layer_norm)(const float* x, const float* w, const float* b, float* y, int64_t width, float eps);
  void (*softmax)(const float* x, float* y, int64_t width);
};

extern const NormKernels kNormKernelsGeneric;
extern const NormKernels kNormKernelsAvx2;
extern const NormKernels kNormKernelsAvx512;

}  // namespace fuselm::kernels
