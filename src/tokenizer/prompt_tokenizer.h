#pragma once
// A model's tokenizer together with its rule for the special tokens around plain text: the one
// object every entry point (tokenize, generate, chat, serve, apply-template) encodes prompts with,
// so the file's rule is honoured the same way everywhere. Which rule a model has is decided where
// its files are read (cli/model_tokenizer.h); this class only applies it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fuselm::tokenizer {

/// The special tokens a model's own files put around plain text, and where that was read.
struct SpecialTokenRules {
  /// True: tokenizer.json's post_processor decides (a Hugging Face directory: transformers v5
  /// ignores tokenizer_config.json's add_bos_token / add_eos_token when tokenizer.json exists).
  /// False: `prefix` and `suffix` are put around the text (a GGUF's add_bos_token / add_eos_token).
  bool from_post_processor = true;
  std::vector<std::uint32_t> prefix, suffix;
  std::string origin;  // the file and field that decided, for messages and --json
};

class PromptTokenizer {
 public:
  PromptTokenizer(Tokenizer tokenizer, SpecialTokenRules rules);

  /// Ids of plain text (a completion prompt, `tokenize --text`, `generate --prompt`): the special
  /// tokens the rules say around it when `add_special_tokens`, none otherwise. Special-token text
  /// written in `text` becomes its ids either way. Throws std::runtime_error for invalid UTF-8.
  std::vector<std::uint32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  /// Ids of text a chat template rendered: nothing is added, because the template writes its own
  /// BOS; transformers' apply_chat_template(tokenize=True) encodes with add_special_tokens=False.
  std::vector<std::uint32_t> encode_rendered(std::string_view text) const { return encode(text, false); }

  const Tokenizer& tokenizer() const { return tokenizer_; }
  const SpecialTokenRules& rules() const { return rules_; }

 private:
  Tokenizer tokenizer_;
  SpecialTokenRules rules_;
};

}  // namespace fuselm::tokenizer
