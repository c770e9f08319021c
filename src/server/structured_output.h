#pragma once
// Structured output: the request fields that constrain the output to a grammar, in the forms the
// OpenAI API, vLLM and llama-server accept, read into one grammar::Grammar and compiled for the
// model's vocabulary. Every malformed value, every JSON Schema keyword the grammar cannot enforce
// and two constraining fields at once are a 400 naming the field: nothing is silently ignored.
#include <nlohmann/json.hpp>

#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace fuselm::server {

/// The grammar a request body asks for, and the field that asked (for error messages).
struct StructuredOutput {
  grammar::Grammar grammar;
  std::string field;  // e.g. "guided_json", "response_format.json_schema.schema"
};

/// Reads, from a completions or chat body:
///   response_format {type: "text" | "json_object" | "json_schema", json_schema: {name, schema,
///     strict}} (OpenAI); guided_json, guided_regex, guided_grammar, guided_choice and
///   structured_outputs {json | regex | grammar | choice | json_object} (vLLM); grammar and
///   json_schema (llama-server).
/// Returns none for an unconstrained body (also response_format text). Throws ApiError 400 (param:
/// the body's field; the message names the inner one, e.g. 'response_format.json_schema.schema') for a malformed value, an unsupported schema keyword (with its JSON pointer) or two
/// constraining fields in one body.
/// `raw_body`, when given, is the body's text: schemas keep its key order (their properties are
/// generated in that order); without it the order is nlohmann::json's (alphabetical).
std::optional<StructuredOutput> read_structured_output(const nlohmann::json& body, std::string_view raw_body = {});

/// The compiled grammar of `so` for the request (400 naming the field when `compiler` is null:
/// the model has no tokenizer, or when compiling fails).
std::shared_ptr<const grammar::CompiledGrammar> compile_structured_output(const StructuredOutput& so,
                                                                           grammar::Compiler* compiler);

/// The server's grammar compiler for a model: each token's bytes from `tok` (tokenizer.h's
/// token_bytes), `logits_width` ids (those past the tokenizer's are never allowed, the tokenizer's
/// past the logits never sampled), `eos_ids` the ids that end a complete output. Throws
/// grammar::GrammarError for an empty vocabulary.
std::shared_ptr<grammar::Compiler> make_grammar_compiler(const tokenizer::Tokenizer& tok, int64_t logits_width,
                                                         const std::vector<int64_t>& eos_ids);

}  // namespace fuselm::server
