#pragma once
// Embeddings: a request's final hidden state (the LM head's input, after the final norm) pooled
// over its prompt into one vector, as sentence-transformers' Pooling module does for its modes
// (mean over the tokens, the last token, the first token), optionally L2-normalised.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fuselm::engine {

enum class Pooling { last, mean, cls };

/// "last", "mean", "cls".
const char* pooling_name(Pooling p);
/// The mode named `name` ("last", "mean", "cls"; also sentence-transformers' "lasttoken"); none
/// for any other.
std::optional<Pooling> parse_pooling(std::string_view name);

/// Whether the mode reads the hidden state of every prompt row (mean, cls), so none of the
/// prompt's KV may come from the prefix cache; last reads the final row only.
inline bool pools_all_rows(Pooling p) { return p != Pooling::last; }

/// One request's running pool: fed each prompt row's hidden state ([hidden] f32) with its
/// position, in any order of chunks; result() after the last row.
class PoolState {
 public:
  PoolState(Pooling mode, int64_t num_rows, bool normalize) : mode_(mode), rows_(num_rows), normalize_(normalize) {}
  void add(int64_t position, std::span<const float> hidden);
  /// Forgets what was added (the sequence was preempted: its rows are computed again).
  void reset() { acc_.clear(); }
  /// The pooled vector (L2-normalised when asked; a zero vector stays zero).
  std::vector<float> result() const;

 private:
  Pooling mode_;
  int64_t rows_;
  bool normalize_;
  std::vector<double> acc_;
};

}  // namespace fuselm::engine
