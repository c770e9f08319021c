#pragma once
// Rotary position embedding applied to fp32 activations in one pass: what the captured graph spells
// as x·cos + rotate(x)·sin (RoFormer, Su et al. 2021; transformers' apply_rotary_pos_emb).
//
//   half         rotate(x) = cat(-x[..., d/2:], x[..., :d/2])   (transformers' rotate_half: Llama,
//                Mistral, Qwen, Gemma, Phi, GPT-NeoX and the partial-rotary ones on their slice)
//   interleaved  rotate(x)[2j] = -x[2j+1], rotate(x)[2j+1] = x[2j]   (rotate_every_two: GPT-J,
//                CodeGen, Cohere, GLM)
//
// The fusers put it in (src/fusers/rope.cc) only where the graph computes exactly that, so the
// pairing is read from the dataflow, never from a model name.
#include <cstdint>

#include "kernels/cpu/strided.h"

namespace fuselm::kernels {

enum class RopePairing : uint8_t { half, interleaved };

/// y = x·cos + rotate(x)·sin over the last dim d (even), in fp32. x, cos, sin: f32 views, any
/// strides; cos and sin broadcast to y's shape (their strides already broadcast: 0 on the dims they
/// lack); y: f32, x's shape, may not overlap the inputs. Rows split over the thread pool when many.
/// Products and the sum round as torch's separate mul and add do (no fused multiply-add).
/// Throws std::invalid_argument when d is odd or a dtype is not f32.
void rope(RopePairing pairing, const Strided& x, const Strided& cos, const Strided& sin, const Strided& y);

}  // namespace fuselm::kernels
