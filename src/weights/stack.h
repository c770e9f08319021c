#pragma once
// Parameters made at load from loaded ones: the weights pipeline after load_parameters
// (bind + convert, each checkpoint tensor once): stack -> shard.
//   stack  a fusion's stacked weight: concat(sources, axis) in the sources' storage dtype, into an
//          owned 64-byte aligned buffer ([Q;K;V], [gate;up], [q_down;kv_down]); experts' per-expert
//          tensors are stacked by load_parameters itself (capture's "stack" entries)
//   shard  one rank's share under tensor parallelism: the identity at TP size 1, the only size
//          built yet (the TP issue fills in the per-rank sections the fusers annotate)
// Conversion is per element, so converting before stacking gives the bytes stacking first would.
#include <map>
#include <string>
#include <vector>

#include "weights/aligned_buffer.h"
#include "weights/load_parameters.h"

namespace fuselm::weights {

/// concat(sources, axis): every source of one storage dtype and rank, equal on the other axes.
/// `shape`, when not empty, is the stacked shape the plan expects (checked).
struct StackSpec {
  std::string target;
  std::vector<std::string> sources;
  int axis = 0;
  std::vector<int64_t> shape;
};

/// Tensor parallelism's rank and size (1: no TP).
struct ShardSpec {
  int64_t rank = 0, size = 1;
};

/// The stacked parameter in a new owned buffer appended to `buffers`. Throws WeightsError naming
/// the target for a source that is not loaded, an axis out of range, sources that differ in dtype
/// or rank or do not stack along the axis, or a shape other than spec.shape.
WeightView stack(const StackSpec& spec, const LoadedParameters& params, std::vector<AlignedBuffer>& buffers);

/// Rank s.rank's share of v: v itself at size 1. Throws WeightsError for a larger size (tensor
/// parallelism is not built yet).
WeightView shard(const WeightView& v, const ShardSpec& s);

/// The pipeline for made parameters: each spec stacked, then sharded; target -> view.
std::map<std::string, WeightView> stack_and_shard(const std::vector<StackSpec>& specs, const LoadedParameters& params,
                                                  const ShardSpec& shard_spec, std::vector<AlignedBuffer>& buffers);

}  // namespace fuselm::weights
