#pragma once
// Row-wise normalisations of fp32 activations: RMSNorm, LayerNorm, softmax over the last dim.
//
// All take rows of `width` contiguous floats at row strides ldx (input) and ldy (output); rows are
// independent and split over OpenMP threads. y may equal x (in place); no other overlap. Sums are
// fp32.
//
//   rms_norm:   y[r,:] = x[r,:] · rsqrt(mean(x[r,:]²) + eps) · (w + w_offset)
//               w: fp32 [width] or nullptr (then the factor is 1, w_offset unused);
//               w_offset = 1 gives the (1 + w) form (Gemma), 0 the plain one (Llama).
//   layer_norm: y[r,:] = (x[r,:] - mean) · rsqrt(var + eps) · w + b   (biased variance, like torch)
//               w, b: fp32 [width] or nullptr (then 1, resp. 0).
//   softmax:    y[r,:] = exp(x[r,:] - max) / sum(exp(x[r,:] - max))   (torch.softmax(dim=-1))
#include <cstdint>

namespace fuselm::kernels {

void rms_norm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int64_t rows,
              int64_t width, float eps, float w_offset);

void layer_norm(const float* x, int64_t ldx, const float* w, const float* b, float* y, int64_t ldy,
                int64_t rows, int64_t width, float eps);

void softmax(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t width);

}  // namespace fuselm::kernels
