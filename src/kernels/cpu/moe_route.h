#pragma once
// The routing of a mixture-of-experts block, for the router the MoE fuser proved (docs/moe.md):
//
//   logits  fp32 [t, e]                      the gate linear's output
//   scores  = softmax(logits) | sigmoid(logits) | logits (softmax_of_topk)
//   choice  = scores + correction            (correction fp32 [e] or null: selection only)
//   groups  > 1: each group of e/groups experts scores its top 2 summed (top2_sum) or its max;
//           the topk_group best groups stay, the other groups' experts are excluded
//   ids     = top-k of choice (largest first, ties to the lower index)          int64 [t, k]
//   weights = scores at ids, or softmax over the chosen logits (softmax_of_topk); then
//             optionally / (sum + renorm_eps), then × scaling                     fp32 [t, k]
//
// Rows are independent (split over threads for large t).
#include <cstdint>

namespace fuselm::kernels {

enum class MoeScoring : unsigned char { softmax, sigmoid, softmax_of_topk };
enum class MoeGroupScore : unsigned char { none, top2_sum, max };

struct MoeRouteArgs {
  const float* logits = nullptr;
  const float* correction = nullptr;
  int64_t t = 0, e = 0, k = 0;
  MoeScoring scoring = MoeScoring::softmax;
  int64_t groups = 1, topk_group = 1;
  MoeGroupScore group_score = MoeGroupScore::none;
  bool renorm = false;
  float renorm_eps = 0.0f, scaling = 1.0f;
  float* weights = nullptr;
  int64_t* ids = nullptr;
};

/// Throws std::invalid_argument for k outside [1, e], groups not dividing e, topk_group outside
/// [1, groups], or too few experts left in the kept groups for k.
void moe_route(const MoeRouteArgs& a);

}  // namespace fuselm::kernels
