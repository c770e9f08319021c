// libFuzzer target: an ir.json. ir::load either returns a graph that ir::verify accepts or throws
// std::runtime_error (one line naming the file); anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "fuzz_input.h"
#include "ir/load.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuselm::fuzz::MemFile file(data, size);
  try {
    const fuselm::ir::Graph g = fuselm::ir::load(file.path());
    fuselm::ir::verify(g);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
