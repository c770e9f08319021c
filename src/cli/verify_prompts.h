#pragma once
// The prompts of `fuselm verify`: token ids fixed before either side runs, so both engines see the
// same ids and tokenization is not what is compared (docs/verify.md).
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "tokenizer/prompt_tokenizer.h"

namespace fuselm::cli {

struct VerifyPrompt {
  std::string name;  // "7 tokens", "513 tokens (window 512 + 1)", "prompts.json #2"
  std::vector<int64_t> ids;
};

/// The widest attention limit in the graph: the largest literal sliding_window or chunk_size of
/// its fuselm ops (the attention op's arguments, read at capture from the model's mask); 0 when
/// every layer attends to the whole context.
int64_t attention_window(const ir::Graph& g);

/// The built-in prompts: prefixes of 7, 64 and 300 tokens of a fixed English text (tokenized with
/// the model's tokenizer and its special tokens, repeated when too short), and one of window + 1
/// tokens when window > 0; none longer than max_prompt. Without a tokenizer, fixed pseudo-random
/// ids below vocab.
std::vector<VerifyPrompt> builtin_prompts(const tokenizer::PromptTokenizer* tok, int64_t vocab, int64_t window,
                                          int64_t max_prompt);

/// --prompts FILE: a JSON array whose items are texts (tokenized as above) or arrays of token ids.
/// Throws std::runtime_error naming the file and item for anything else, an empty prompt, an id
/// outside [0, vocab), a text without a tokenizer, or a prompt longer than max_prompt.
std::vector<VerifyPrompt> prompts_from_file(const std::string& path, const tokenizer::PromptTokenizer* tok, int64_t vocab,
                                            int64_t max_prompt);

}  // namespace fuselm::cli
