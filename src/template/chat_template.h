#pragma once
// Chat templates: renders a model's Jinja chat template in C++ as transformers renders it with
// jinja2 (ImmutableSandboxedEnvironment, trim_blocks=True, lstrip_blocks=True, loopcontrols,
// transformers' tojson/raise_exception/strftime_now). See docs/templates.md for the subset.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

namespace fuselm::tmpl {

/// Error raised by a template: parse errors and unsupported constructs ("line N: ..."), and
/// raise_exception(msg) from the template itself (what() == msg exactly).
struct TemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Renders Jinja `source` with `variables` (messages, tools, add_generation_prompt, bos_token,
/// eos_token, and any extra keys); JSON null values are treated as absent, as transformers does.
/// As render_jinja_template, `tools` and `documents` are none and `add_generation_prompt` is false
/// when absent. nlohmann::json keeps object keys sorted; use the ordered_json overload where the
/// key order of the input must show in the output (tojson of tool schemas).
std::string render(const std::string& source, const nlohmann::json& variables);
/// The same with object keys kept in the order of `variables` (as Python dicts keep them).
std::string render(const std::string& source, const nlohmann::ordered_json& variables);

/// A model's chat template as transformers picks it.
struct ModelTemplate {
  std::string source;
  std::string origin;  // the file (and entry name) it came from
  std::string bos_token, eos_token;
};

/// The bos/eos token strings a model's templates see: tokenizer_config.json's, else
/// special_tokens_map.json's (string or {"content": ...}); "" where the model names none. Read
/// whether or not the model has a template of its own (apply-template --template uses them too).
std::pair<std::string, std::string> find_bos_eos_tokens(const std::filesystem::path& model_dir);

/// From model_dir: chat_template.jinja, else tokenizer_config.json's chat_template (string, or a
/// list of {name, template}: `name` if given, else "default", else "tool_use" when with_tools).
/// bos/eos token strings come from tokenizer_config.json (string or {"content": ...}).
/// nullopt when the model has none; throws std::runtime_error naming the file on a bad file.
std::optional<ModelTemplate> find_model_template(const std::filesystem::path& model_dir,
                                                 const std::string& name = "", bool with_tools = false);

}  // namespace fuselm::tmpl
