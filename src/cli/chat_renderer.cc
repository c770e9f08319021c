#include "cli/chat_renderer.h"

#if __has_include("template/chat_template.h")
#include "template/chat_template.h"
#define FUSELM_HAVE_TEMPLATES 1
#endif

#include "server/api_error.h"

namespace fuselm::cli {

ChatRenderer make_chat_renderer(const std::filesystem::path& model_dir) {
#ifdef FUSELM_HAVE_TEMPLATES
  auto found = tmpl::find_model_template(model_dir, "", false);
  if (!found) return {};
  auto tools_tmpl = tmpl::find_model_template(model_dir, "", true);
  return [t = *found, tt = tools_tmpl ? *tools_tmpl : *found](const nlohmann::json& body, bool add_generation_prompt) {
    const bool tools = body.contains("tools") && body["tools"].is_array() && !body["tools"].empty();
    const auto& use = tools ? tt : t;
    nlohmann::json vars = {{"messages", body.at("messages")},
                           {"add_generation_prompt", add_generation_prompt},
                           {"bos_token", use.bos_token},
                           {"eos_token", use.eos_token}};
    if (tools) vars["tools"] = body["tools"];
    try {
      return tmpl::render(use.source, vars);
    } catch (const tmpl::TemplateError& e) {
      throw server::ApiError(400, std::string("chat template (") + use.origin + "): " + e.what(), "messages");
    }
  };
#else
  (void)model_dir;
  return {};
#endif
}

}  // namespace fuselm::cli
