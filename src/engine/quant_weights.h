#pragma once
// Block-quantized weights in a loaded model: which parameters may stay quantized (a structural
// question: only the linear op's weight and the embedding's table read blocks), and the packed
// copies the integer kernels stream, made once at load.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fusers/fuser.h"
#include "ir/graph.h"
#include "kernels/cpu/quant_weight.h"
#include "weights/load_parameters.h"

namespace fuselm::engine {

/// The parameter targets every use of which in `g` (the fused graph) is aten.linear's weight
/// (argument 1) or aten.embedding's table (argument 0); a fused weight's sources when the fused
/// weight is one. Targets that share a checkpoint key (tied weights) are in only when all are.
std::set<std::string, std::less<>> quantizable_parameters(const ir::Graph& g,
                                                          const std::vector<fusers::WeightTransform>& fused);

/// The targets `g` reads through an aten.embedding table (their blocks must stay readable).
std::set<std::string, std::less<>> embedding_tables(const ir::Graph& g);

/// Owns the kernels' view of each quantized weight and its packed copy (one per distinct data
/// pointer, so tied weights are packed once).
class QuantWeights {
 public:
  /// The kernel view of quantized `v` ([n, k]), packed when QuantPacked::packable(type) (the
  /// K-quants run on their blocks). Stable address; `v.data` must outlive it.
  const kernels::QuantWeight* adopt(const weights::WeightView& v);
  /// Bytes held in packed copies.
  int64_t packed_bytes() const;

 private:
  std::map<const void*, std::unique_ptr<kernels::QuantWeight>> views_;
  std::vector<std::unique_ptr<kernels::QuantPacked>> packed_;
};

}  // namespace fuselm::engine
