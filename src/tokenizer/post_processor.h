#pragma once
// tokenizer.json "post_processor": what encode(add_special_tokens=true) adds around the ids.
// Supported: TemplateProcessing (single-sequence template), BertProcessing and RobertaProcessing
// (cls A sep), ByteLevel (no change to ids), Sequence.
#include <cstdint>
#include <memory>
#include <vector>

#include "tokenizer/json_field.h"

namespace fuselm::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  /// Rewrites the ids of one encoded sequence; adds special tokens only if `add_special_tokens`.
  virtual void process(std::vector<std::uint32_t>& ids, bool add_special_tokens) const = 0;
};

/// Builds the post-processor described by `spec`. Throws std::runtime_error naming the field for
/// an unsupported type or a template that names a token missing from special_tokens.
std::unique_ptr<PostProcessor> make_post_processor(const Field& spec);

}  // namespace fuselm::tokenizer
