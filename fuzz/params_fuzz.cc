// libFuzzer target: the IR's parameters table (checkpoint keys, stacks, chunks, ties, shapes and
// dtypes, as capture writes it) against one small safetensors checkpoint. load_parameters either
// returns every parameter or throws std::runtime_error (WeightsError, one line naming the
// parameter, key or tensor); anything else is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "weights/checkpoint.h"
#include "weights/load_parameters.h"

namespace {

// A checkpoint of f32, bf16 and f16 tensors, per-expert parts and a packed tensor, written once.
const fuselm::weights::Checkpoint& checkpoint() {
  static const fuselm::weights::Checkpoint c = [] {
    char tmpl[] = "/tmp/fuselm-params-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    const std::filesystem::path dir(tmpl);
    struct T { const char* name; const char* dtype; int rows, cols, elem; };
    const T tensors[] = {{"a", "F32", 6, 4, 4},           {"b", "BF16", 4, 2, 2}, {"h", "F16", 2, 2, 2},
                         {"experts.0.w", "F32", 2, 2, 4}, {"experts.1.w", "F32", 2, 2, 4}};
    nlohmann::json header = nlohmann::json::object();
    std::string data;
    for (const T& t : tensors) {
      const size_t begin = data.size(), bytes = static_cast<size_t>(t.rows * t.cols * t.elem);
      for (size_t i = 0; i < bytes; ++i) data.push_back(static_cast<char>(i % 7 == 0 ? 0x3f : i));
      header[t.name] = {{"dtype", t.dtype}, {"shape", {t.rows, t.cols}}, {"data_offsets", {begin, data.size()}}};
    }
    const std::string h = header.dump();
    const uint64_t n = h.size();
    std::ofstream f(dir / "model.safetensors", std::ios::binary);
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << h << data;
    f.close();
    return fuselm::weights::Checkpoint::open(dir);
  }();
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json table = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (table.is_discarded()) return 0;
  for (const auto policy : {fuselm::weights::DTypePolicy::auto_, fuselm::weights::DTypePolicy::q8_0}) {
    try {
      fuselm::weights::LoadOptions options;
      options.dtype = policy;
      fuselm::weights::load_parameters(table, checkpoint(), options);
    } catch (const std::runtime_error&) {
    }
  }
  return 0;
}
