#include "engine/pooling.h"

#include <cmath>

namespace fuselm::engine {

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::last: return "last";
    case Pooling::mean: return "mean";
    case Pooling::cls: return "cls";
  }
  return "last";
}

std::optional<Pooling> parse_pooling(std::string_view name) {
  if (name == "last" || name == "lasttoken") return Pooling::last;
  if (name == "mean") return Pooling::mean;
  if (name == "cls") return Pooling::cls;
  return std::nullopt;
}

void PoolState::add(int64_t position, std::span<const float> hidden) {
  const bool take = mode_ == Pooling::mean || (mode_ == Pooling::last && position == rows_ - 1) ||
                    (mode_ == Pooling::cls && position == 0);
  if (!take) return;
  if (acc_.empty()) acc_.assign(hidden.size(), 0.0);
  for (size_t i = 0; i < hidden.size() && i < acc_.size(); ++i) acc_[i] += hidden[i];
}

std::vector<float> PoolState::result() const {
  std::vector<double> v = acc_;
  if (mode_ == Pooling::mean && rows_ > 0)
    for (auto& x : v) x /= static_cast<double>(rows_);
  double norm = 0;
  for (double x : v) norm += x * x;
  norm = std::sqrt(norm);
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(normalize_ && norm > 0 ? v[i] / norm : v[i]);
  return out;
}

}  // namespace fuselm::engine
