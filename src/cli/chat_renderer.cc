#include "cli/chat_renderer.h"

#include "server/api_error.h"
#include "template/chat_template.h"

namespace fuselm::cli {

ChatRenderer make_chat_renderer(const std::filesystem::path& model_dir) {
  auto plain = tmpl::find_model_template(model_dir, "", false);
  if (!plain) return {};
  auto with_tools = tmpl::find_model_template(model_dir, "", true);
  return [plain = *plain, tooled = with_tools ? *with_tools : *plain](const nlohmann::ordered_json& body,
                                                                       bool add_generation_prompt) {
    const auto tools = body.find("tools");
    const bool has_tools = tools != body.end() && tools->is_array() && !tools->empty();
    const auto& t = has_tools ? tooled : plain;
    nlohmann::ordered_json vars = {{"messages", body.at("messages")}, {"add_generation_prompt", add_generation_prompt}};
    // As transformers' special_tokens_map: a token the model does not name is absent, not "".
    if (!t.bos_token.empty()) vars["bos_token"] = t.bos_token;
    if (!t.eos_token.empty()) vars["eos_token"] = t.eos_token;
    if (has_tools) vars["tools"] = *tools;
    // vLLM's extra template variables: top-level enable_thinking, then chat_template_kwargs
    // (checked by the server: an object that does not set messages/tools/add_generation_prompt).
    if (auto e = body.find("enable_thinking"); e != body.end() && e->is_boolean()) vars["enable_thinking"] = *e;
    if (auto k = body.find("chat_template_kwargs"); k != body.end() && k->is_object())
      for (const auto& [key, value] : k->items())
        if (key != "messages" && key != "tools" && key != "add_generation_prompt") vars[key] = value;
    try {
      return tmpl::render(t.source, vars);
    } catch (const tmpl::TemplateError& e) {
      // Not t.origin: the template's path on the server is not the client's business.
      throw server::ApiError(400, std::string("the chat template failed: ") + e.what(), "messages");
    }
  };
}

}  // namespace fuselm::cli
