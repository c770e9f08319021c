#include "weights/gguf_tensor.h"

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "weights/error.h"

namespace fuselm::weights {
namespace {

constexpr uint32_t kPlain[] = {0, 1, 30};                 // F32, F16, BF16
constexpr uint32_t kQuantized[] = {8, 2, 3, 12, 13, 14, 6, 7};  // Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, Q5_0, Q5_1

template <size_t N>
bool in(const uint32_t (&set)[N], uint32_t v) {
  for (uint32_t x : set)
    if (x == v) return true;
  return false;
}

}  // namespace

bool gguf_type_quantized(uint32_t ggml_type) { return in(kQuantized, ggml_type); }

bool gguf_type_supported(uint32_t ggml_type) { return in(kPlain, ggml_type) || in(kQuantized, ggml_type); }

void check_gguf_type_supported(const GgufFile& f, const GgufTensor& t) {
  if (gguf_type_supported(t.type->id)) return;
  std::string names;
  for (uint32_t id : kPlain) names += fmt::format("{}{}", names.empty() ? "" : ", ", ggml_type_info(id)->name);
  for (uint32_t id : kQuantized) names += fmt::format(", {}", ggml_type_info(id)->name);
  throw WeightsError(fmt::format("{}: tensor '{}' has ggml type {}, which fuselm cannot compute with (supported: {})",
                                 f.path().string(), t.name, t.type->name, names));
}

std::vector<int64_t> rope_unpermute_rows(int64_t rows, int64_t n_head) {
  if (n_head <= 0 || rows < 0 || rows % (2 * n_head) != 0)
    throw std::invalid_argument(
        fmt::format("rope_unpermute_rows: {} rows are not a whole number of {} heads of pairs", rows, n_head));
  // GGUF head h holds rows (h, d, two) = h·2D + 2d + two; HF wants (h, two, d) = h·2D + two·D + d.
  const int64_t half = rows / n_head / 2;
  std::vector<int64_t> src(static_cast<size_t>(rows));
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t two = 0; two < 2; ++two)
      for (int64_t d = 0; d < half; ++d) src[h * 2 * half + two * half + d] = h * 2 * half + 2 * d + two;
  return src;
}

}  // namespace fuselm::weights
