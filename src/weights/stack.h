#pragma once
// Parameters made at load from loaded ones: the weights pipeline after load_parameters
// (bind + convert, each checkpoint tensor once): stack -> shard.
//   stack  a fusion's stacked weight: concat(sources, axis) in the sources' storage dtype, into an
//          owned 64-byte aligned buffer ([Q;K;V], [gate;up], [q_down;kv_down]); experts' per-expert
//          tensors are stacked by load_parameters itself (capture's "stack" entries)
//   shard  one rank's share under tensor parallelism (src/passes/shard_plan.h says which pieces):
//          slice() cuts a parameter; a stacked weight is cut per source before stacking
//          ([q_r; k_r; v_r] from q_r, k_r, v_r), so no rank builds the full stack
// Conversion is per element, so converting before stacking gives the bytes stacking first would.
#include <map>
#include <string>
#include <vector>

#include "weights/aligned_buffer.h"
#include "weights/load_parameters.h"

namespace fuselm::weights {

/// concat(sources, axis): every source of one storage dtype and rank, equal on the other axes.
/// `shape`, when not empty, is the stacked shape the plan expects (checked).
/// One rank's pieces of a tensor: (offset, length) along `axis`, concatenated in order; `zero`
/// gives zeros of the sliced shape (a row-parallel bias on ranks other than 0).
struct SliceSpec {
  int axis = 0;
  std::vector<std::pair<int64_t, int64_t>> pieces;
  bool zero = false;
};

/// `source_slices`, when not empty, holds one slice per source, cut before stacking; `shape` is then
/// the per-rank stacked shape.
struct StackSpec {
  std::string target;
  std::vector<std::string> sources;
  int axis = 0;
  std::vector<int64_t> shape;
  std::vector<SliceSpec> source_slices;
};

/// v's pieces in a new owned 64-byte aligned buffer appended to `buffers`. Throws WeightsError
/// naming `what` for an axis or piece out of range.
WeightView slice(const WeightView& v, const SliceSpec& s, const std::string& what, std::vector<AlignedBuffer>& buffers);

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
