// libFuzzer target: a .safetensors file (8-byte header length, JSON header, data). Every input is
// either opened with every tensor inside the file, or refused with a WeightsError; anything else
// (a crash, a sanitizer report, another exception) is a finding.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.h"
#include "weights/error.h"
#include "weights/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuselm::fuzz::MemFile file(data, size);
  try {
    const auto f = fuselm::weights::SafetensorsFile::open(file.path());
    unsigned sum = 0;
    for (const auto& [name, t] : f.tensors()) {
      // Touch the first and last byte: a view past the file's end faults.
      if (!t.bytes.empty()) sum += static_cast<unsigned>(t.bytes.front()) + static_cast<unsigned>(t.bytes.back());
    }
    (void)sum;
  } catch (const fuselm::weights::WeightsError&) {
  }
  return 0;
}
