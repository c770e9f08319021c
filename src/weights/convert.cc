#include "weights/convert.h"

namespace fuselm::weights {

// The conversion loop and its threads are the kernels' (weights/ owns no parallel region).
void convert_elements(const void* src, kernels::DType from, void* dst, kernels::DType to, int64_t n) {
  kernels::convert_dtype(src, from, dst, to, n);
}

}  // namespace fuselm::weights
