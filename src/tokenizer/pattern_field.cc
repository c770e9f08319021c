#include "tokenizer/pattern_field.h"

#include <stdexcept>

namespace fuselm::tokenizer {

Regex pattern_regex(const Field& pattern) {
  try {
    if (auto s = pattern.get("String")) return Regex(s->str(), true);
    if (auto r = pattern.get("Regex")) return Regex(r->str(), false);
  } catch (const std::runtime_error& e) {
    pattern.fail(e.what());
  }
  pattern.fail("must hold \"String\" or \"Regex\"");
}

}  // namespace fuselm::tokenizer
