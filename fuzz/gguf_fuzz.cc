// libFuzzer target: a GGUF file (header, metadata key/values, tensor infos, data). Every input is
// either opened, with every tensor's bytes inside the file and every metadata value readable
// through the typed getters, or refused with a WeightsError; anything else (a crash, a sanitizer
// report, another exception) is a finding.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.h"
#include "weights/error.h"
#include "weights/gguf.h"
#include "weights/gguf_tensor.h"

namespace {

// The typed getters either return or throw WeightsError (wrong kind, out of range).
void read_metadata(const fuselm::weights::GgufFile& f) {
  for (const auto& key : f.keys()) {
    try { (void)f.get_string(key); } catch (const fuselm::weights::WeightsError&) {}
    try { (void)f.get_uint(key); } catch (const fuselm::weights::WeightsError&) {}
    try { (void)f.get_int(key); } catch (const fuselm::weights::WeightsError&) {}
    try { (void)f.get_float(key); } catch (const fuselm::weights::WeightsError&) {}
    try { (void)f.get_bool(key); } catch (const fuselm::weights::WeightsError&) {}
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuselm::fuzz::MemFile file(data, size);
  try {
    const auto f = fuselm::weights::GgufFile::open(file.path());
    read_metadata(f);
    unsigned sum = 0;
    for (const auto& t : f.tensors()) {
      // Touch the first and last byte: a view past the file's end faults.
      if (!t.bytes.empty()) sum += static_cast<unsigned>(t.bytes.front()) + static_cast<unsigned>(t.bytes.back());
      (void)t.shape();
      (void)t.numel();
      try {
        fuselm::weights::check_gguf_type_supported(f, t);
      } catch (const fuselm::weights::WeightsError&) {
      }
      if (f.find(t.name) != &t) __builtin_trap();  // names are unique, so find() gets this one
    }
    (void)sum;
  } catch (const fuselm::weights::WeightsError&) {
  }
  return 0;
}
