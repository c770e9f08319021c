#pragma once
// Constrained decoding: a grammar the output must follow (a JSON Schema, any JSON object, a regular
// expression, an EBNF grammar, literal text, and their concatenation and alternation), compiled
// once per tokenizer vocabulary, and a per-sequence matcher that says which tokens may come next
// (a bitmask over the vocabulary) and follows the tokens sampled.
//
// Built on xgrammar's C++ library (cmake/xgrammar.cmake, version pinned in
// scripts/xgrammar-version); no xgrammar type appears here. A JSON Schema is walked before it is
// converted and every keyword xgrammar would not enforce is refused (UnsupportedSchemaError):
// constrained output never silently fails open (docs/structured-output.md lists the keywords).
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fuselm::grammar {

/// A grammar that cannot be built from outside input (a malformed schema, regular expression or
/// EBNF text); what() is one line naming the problem, never a server path. The server answers 400.
class GrammarError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A JSON Schema using a keyword (or a keyword value, e.g. a string "format") that the grammar
/// cannot enforce. `keyword()` is the keyword, `pointer()` its JSON Pointer inside the schema
/// (RFC 6901, "" for the root: e.g. "/properties/tags/uniqueItems").
class UnsupportedSchemaError : public GrammarError {
 public:
  UnsupportedSchemaError(std::string keyword, std::string pointer, const std::string& why);
  const std::string& keyword() const { return keyword_; }
  const std::string& pointer() const { return pointer_; }

 private:
  std::string keyword_, pointer_;
};

/// A grammar, not yet tied to a vocabulary: an immutable value, cheap to copy. Every factory checks
/// its input at once and throws GrammarError (or UnsupportedSchemaError) on bad input.
class Grammar {
 public:
  /// Output that is one JSON value valid under `schema` (draft 2020-12 keywords; see
  /// docs/structured-output.md for those enforced). `strict` (OpenAI's json_schema.strict):
  /// objects carry no properties beyond those the schema names unless it says otherwise
  /// (additionalProperties / unevaluatedProperties); without strict the JSON Schema default
  /// (any further property) applies. Output JSON is compact but for ", " and ": " separators.
  /// Properties are generated in the schema's order (ordered_json keeps it; a plain json's is
  /// alphabetical). Throws UnsupportedSchemaError for a keyword not enforced, GrammarError for an
  /// invalid or unsatisfiable schema.
  static Grammar json_schema(const nlohmann::ordered_json& schema, bool strict = true);
  static Grammar json_schema(const nlohmann::json& schema, bool strict = true);
  /// Output that is any JSON object (OpenAI's response_format json_object).
  static Grammar any_json_object();
  /// Output that matches the regular expression `pattern` in full (ECMAScript-like syntax as
  /// xgrammar's regex converter reads it).
  static Grammar regex(const std::string& pattern);
  /// Output derived from the rule `root` of an EBNF grammar in xgrammar's dialect (GBNF, as
  /// llama.cpp and llama-server's `grammar` field write it).
  static Grammar ebnf(const std::string& text, const std::string& root = "root");
  /// Output that is exactly `text` (bytes).
  static Grammar literal(const std::string& text);
  /// Output that is each part's output in turn (at least one part).
  static Grammar concat(const std::vector<Grammar>& parts);
  /// Output that is one of the alternatives' outputs (at least one alternative).
  static Grammar any_of(const std::vector<Grammar>& alternatives);

  /// A key that is equal for grammars built the same way (the compiler's cache key).
  const std::string& key() const;
  /// The grammar as EBNF text (for logs and tests).
  std::string to_ebnf() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Grammar(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

/// A tokenizer's vocabulary as the compiler needs it.
struct Vocabulary {
  /// Each token id's bytes as it appears in decoded text (a byte-level BPE token's real bytes, a
  /// byte-fallback token <0x0A>'s one byte), or "" for a special/control token, which a grammar
  /// never allows. Its size may be below `size` (ids past it are treated as special).
  std::vector<std::string> token_bytes;
  /// The model's logits width (number of token ids); >= token_bytes.size().
  int32_t size = 0;
  /// The ids that end generation (EOS and the like): allowed once the grammar is complete.
  std::vector<int32_t> stop_ids;
};

/// A grammar compiled against one vocabulary; shared by every sequence that uses it.
class CompiledGrammar;

/// Compiles grammars for one vocabulary (one per server, built at startup); thread-safe, caches
/// compiled grammars by Grammar::key().
class Compiler {
 public:
  /// Throws GrammarError when the vocabulary is empty or size < token_bytes.size().
  explicit Compiler(const Vocabulary& vocab, int threads = 1);
  ~Compiler();
  Compiler(const Compiler&) = delete;
  Compiler& operator=(const Compiler&) = delete;

  /// The compiled form of `g` (from the cache when compiled before). Throws GrammarError, also
  /// for a grammar that matches no output at all (e.g. {"$ref": "#"}).
  std::shared_ptr<const CompiledGrammar> compile(const Grammar& g);
  int32_t vocab_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// int32 words of a token bitmask over `vocab_size` ids: bit (id % 32) of word id / 32 is set when
/// the id is allowed.
int32_t bitmask_words(int32_t vocab_size);

/// One sequence's position in a compiled grammar. Not thread-safe; one per sequence.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> compiled);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  /// Writes the allowed next tokens into `mask` (bitmask_words(vocab_size) words). Once the
  /// grammar is complete only the stop ids are allowed (and, for a grammar that may go on, the
  /// continuations).
  void fill_bitmask(std::span<int32_t> mask);
  /// Sets the logits of every token the grammar does not allow next to -inf (`logits` has
  /// vocab_size floats). Uses and overwrites `scratch`.
  void mask_logits(std::span<float> logits, std::vector<int32_t>& scratch);
  /// Advances past `token`; false (state unchanged) when the grammar does not allow it.
  bool accept(int32_t token);
  /// Whether a stop id was accepted after a complete output: the sequence is done.
  bool terminated() const;
  /// Whether the output so far is complete (a stop id would be accepted).
  bool completed() const;
  int32_t vocab_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fuselm::grammar
