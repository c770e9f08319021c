#pragma once
// The one place that decides, for a model directory, how text becomes prompt ids: its
// tokenizer.json and the rule for the special tokens around plain text, read from the files the
// directory came from. Every command and the server encode through the PromptTokenizer made here.
#include <filesystem>
#include <optional>

#include "tokenizer/prompt_tokenizer.h"

namespace fuselm::cli {

/// The special-token rule of model directory `dir` (as model_dir_of resolves it):
/// - a directory made from a GGUF (model.gguf links it, python/fuselm_capture/gguf_dir.py): the
///   GGUF's own tokenizer.ggml.add_bos_token / add_eos_token with tokenizer.ggml.bos_token_id /
///   eos_token_id, as llama.cpp reads them. A flag that is absent adds nothing, as transformers'
///   GGUF tokenizer adds nothing. A flag set without its token id is an error naming the key.
/// - any other directory: tokenizer.json's post_processor, as transformers v5 loads a directory
///   with a tokenizer.json (it drops tokenizer_config.json's add_bos_token / add_eos_token).
tokenizer::SpecialTokenRules special_token_rules(const std::filesystem::path& dir);

/// `dir`'s tokenizer.json with special_token_rules(dir), or nullopt when there is no
/// tokenizer.json. Throws std::runtime_error naming the file and field on a bad file.
std::optional<tokenizer::PromptTokenizer> load_prompt_tokenizer(const std::filesystem::path& dir);

/// The tokenizer of any model source `generate` takes ("" for the default model, a .gguf file, a
/// directory holding one, a model directory) or of a tokenizer.json file given by its path.
/// Throws std::runtime_error naming the source when it has no tokenizer.json.
tokenizer::PromptTokenizer prompt_tokenizer_of(const std::string& source);

}  // namespace fuselm::cli
