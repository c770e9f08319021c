#include "tokenizer/model.h"

#include <cstdio>

#include "tokenizer/bpe_model.h"
#include "tokenizer/unigram_model.h"
#include "tokenizer/wordpiece_model.h"

namespace fuselm::tokenizer {

std::unique_ptr<Model> make_model(const Field& spec) {
  const auto type = spec.get("type");
  if (!type || type->str() == "BPE") return BpeModel::load(spec);
  if (type->str() == "Unigram") return UnigramModel::load(spec);
  if (type->str() == "WordPiece") return WordPieceModel::load(spec);
  throw std::runtime_error(spec.file() + ": model type '" + type->str() + "' is not supported");
}

std::optional<std::uint32_t> byte_fallback_id(const Model& model, unsigned char b) {
  char code[8];
  std::snprintf(code, sizeof(code), "<0x%02X>", b);
  return model.token_to_id(code);
}

}  // namespace fuselm::tokenizer
