#include "tokenizer/prompt_tokenizer.h"

#include <stdexcept>
#include <utility>

namespace fuselm::tokenizer {

PromptTokenizer::PromptTokenizer(Tokenizer tokenizer, SpecialTokenRules rules)
    : tokenizer_(std::move(tokenizer)), rules_(std::move(rules)) {
  for (const auto* ids : {&rules_.prefix, &rules_.suffix})
    for (std::uint32_t id : *ids)
      if (id >= tokenizer_.vocab_size())  // the rule names a token this vocabulary lacks
        throw std::runtime_error(rules_.origin + ": token id " + std::to_string(id) + " is not in the tokenizer's vocabulary (" +
                                 std::to_string(tokenizer_.vocab_size()) + " ids)");
}

std::vector<std::uint32_t> PromptTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (rules_.from_post_processor) return tokenizer_.encode(text, add_special_tokens);
  std::vector<std::uint32_t> body = tokenizer_.encode(text, false);
  if (!add_special_tokens) return body;
  std::vector<std::uint32_t> ids;
  ids.reserve(rules_.prefix.size() + body.size() + rules_.suffix.size());
  ids.insert(ids.end(), rules_.prefix.begin(), rules_.prefix.end());
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), rules_.suffix.begin(), rules_.suffix.end());
  return ids;
}

}  // namespace fuselm::tokenizer
