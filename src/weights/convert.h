#pragma once
// Element conversion between weight storage dtypes, for loading.
#include <cstdint>

#include "kernels/cpu/dtype.h"

namespace fuselm::weights {

/// dst[i] = src[i] converted from `from` to `to`, for i < n (the same dtype copies). Widening
/// (bf16/f16 -> f32) is exact; narrowing rounds to nearest even (kernels/cpu/dtype.h). `src` needs
/// no alignment; buffers must not overlap. The loop and its threads are kernels::convert_dtype.
void convert_elements(const void* src, kernels::DType from, void* dst, kernels::DType to, int64_t n);

}  // namespace fuselm::weights
