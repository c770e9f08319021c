#pragma once
// The model's chat template (chat_template.jinja or tokenizer_config.json, found by the template
// renderer) as the render function that the server and `fuselm chat` use.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <string>

namespace fuselm::cli {

/// Renders body["messages"] (and body["tools"], when given) to prompt text. The body keeps its
/// keys in request order, as Python dicts do, so tojson in a template matches transformers.
using ChatRenderer = std::function<std::string(const nlohmann::ordered_json& body, bool add_generation_prompt)>;

/// The renderer of `model_dir`'s template, or an empty function when it has none. Render errors
/// are server::ApiError 400 with the template's message (never the file's path on the server).
/// Besides messages and tools, the template sees top-level enable_thinking and the keys of
/// chat_template_kwargs (vLLM's extra template variables).
ChatRenderer make_chat_renderer(const std::filesystem::path& model_dir);

}  // namespace fuselm::cli
