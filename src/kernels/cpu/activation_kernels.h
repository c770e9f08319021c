#pragma once
// Per-ISA kernel table of the activations (internal).
#include <cstdint>

#include "kernels/cpu/activation.h"

namespace fuselm::kernels {

enum class UnaryOp : unsigned char { exp, tanh, sigmoid, silu, gelu, gelu_tanh };

struct ActivationKernels {
  void (*unary)(UnaryOp op, const float* x, float* y, int64_t n);
  void (*act_and_mul)(Act act, const float* a, const float* b, float* y, int64_t n);
};

extern const ActivationKernels kActivationKernelsGeneric;

}  // namespace fuselm::kernels
