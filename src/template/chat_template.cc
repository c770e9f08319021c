#include "template/chat_template.h"

#include <fstream>
#include <sstream>
#include <tuple>

#include "template/evaluator.h"
#include "template/json.h"
#include "template/parser.h"

namespace fuselm::tmpl {
namespace {

template <class J>
std::string render_impl(const std::string& source, const J& variables) {
  if (!variables.is_object()) throw TemplateError("template variables must be a JSON object");
  Template t = parse(source);
  auto globals = std::make_shared<Scope>();
  // render_jinja_template passes these three always; other keys only when given.
  globals->vars["tools"] = Value::none();
  globals->vars["documents"] = Value::none();
  globals->vars["add_generation_prompt"] = Value::boolean(false);
  for (auto it = variables.begin(); it != variables.end(); ++it) {
    if (it.value().is_null()) continue;  // absent, as a None keyword in transformers
    globals->vars[it.key()] = from_json(it.value());
  }
  Context ctx;
  return ctx.render(t, globals);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error(p.string() + ": cannot read");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::ordered_json read_json(const std::filesystem::path& p) {
  try {
    return nlohmann::ordered_json::parse(read_file(p));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(p.string() + ": invalid JSON: " + e.what());
  }
}

/// A special token as tokenizer_config.json spells it: "text", {"content": "text", ...} or null.
std::string token_text(const nlohmann::ordered_json& cfg, const char* key, const std::filesystem::path& file) {
  if (!cfg.contains(key) || cfg[key].is_null()) return "";
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw std::runtime_error(file.string() + ": " + key + " must be a string or {\"content\": ...}");
}

/// tokenizer_config.json's chat_template: a string, or a list of {name, template} picked as
/// transformers' get_chat_template picks (the asked name; else tool_use with tools; else default).
std::optional<std::pair<std::string, std::string>> pick(const nlohmann::ordered_json& t, const std::string& name,
                                                        bool with_tools, const std::filesystem::path& file) {
  if (t.is_null()) return std::nullopt;
  if (t.is_string()) {
    if (!name.empty()) throw std::runtime_error(file.string() + ": has a single chat_template; there is none named '" + name + "'");
    return std::make_pair(t.get<std::string>(), file.string());
  }
  if (!t.is_array()) throw std::runtime_error(file.string() + ": chat_template must be a string or a list of {name, template}");
  std::map<std::string, std::string> named;
  for (const auto& e : t) {
    if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() || !e["template"].is_string())
      throw std::runtime_error(file.string() + ": chat_template list entries must be {\"name\": str, \"template\": str}");
    named[e["name"].get<std::string>()] = e["template"].get<std::string>();
  }
  std::string chosen = name;
  if (chosen.empty()) chosen = with_tools && named.count("tool_use") ? "tool_use" : "default";
  auto it = named.find(chosen);
  if (it == named.end()) {
    if (name.empty())
      throw std::runtime_error(file.string() + ": no 'default' chat template among the named ones; ask for one by name");
    throw std::runtime_error(file.string() + ": no chat template named '" + name + "'");
  }
  return std::make_pair(it->second, file.string() + " [" + chosen + "]");
}

}  // namespace

std::string render(const std::string& source, const nlohmann::json& variables) { return render_impl(source, variables); }
std::string render(const std::string& source, const nlohmann::ordered_json& variables) {
  return render_impl(source, variables);
}

std::pair<std::string, std::string> find_bos_eos_tokens(const std::filesystem::path& model_dir) {
  std::string bos, eos;
  const auto cfg_path = model_dir / "tokenizer_config.json";
  if (std::filesystem::exists(cfg_path)) {
    const auto cfg = read_json(cfg_path);
    if (!cfg.is_object()) throw std::runtime_error(cfg_path.string() + ": not a JSON object");
    bos = token_text(cfg, "bos_token", cfg_path);
    eos = token_text(cfg, "eos_token", cfg_path);
  }
  const auto map_path = model_dir / "special_tokens_map.json";
  if ((bos.empty() || eos.empty()) && std::filesystem::exists(map_path)) {
    auto m = read_json(map_path);
    if (bos.empty()) bos = token_text(m, "bos_token", map_path);
    if (eos.empty()) eos = token_text(m, "eos_token", map_path);
  }
  return {bos, eos};
}

std::optional<ModelTemplate> find_model_template(const std::filesystem::path& model_dir, const std::string& name,
                                                 bool with_tools) {
  ModelTemplate mt;
  std::tie(mt.bos_token, mt.eos_token) = find_bos_eos_tokens(model_dir);
  const auto cfg_path = model_dir / "tokenizer_config.json";
  nlohmann::ordered_json cfg = nlohmann::ordered_json::object();
  if (std::filesystem::exists(cfg_path)) cfg = read_json(cfg_path);
  const auto jinja_path = model_dir / "chat_template.jinja";
  if (name.empty() && std::filesystem::exists(jinja_path)) {
    mt.source = read_file(jinja_path);
    mt.origin = jinja_path.string();
    return mt;
  }
  const auto json_path = model_dir / "chat_template.json";  // older processor-style file
  std::optional<std::pair<std::string, std::string>> found;
  if (cfg.contains("chat_template")) found = pick(cfg["chat_template"], name, with_tools, cfg_path);
  else if (std::filesystem::exists(json_path)) {
    auto j = read_json(json_path);
    if (!j.is_object() || !j.contains("chat_template"))
      throw std::runtime_error(json_path.string() + ": expected an object with chat_template");
    found = pick(j["chat_template"], name, with_tools, json_path);
  } else if (!name.empty()) {
    throw std::runtime_error(model_dir.string() + ": no chat template named '" + name + "'");
  }
  if (!found) return std::nullopt;
  mt.source = found->first;
  mt.origin = found->second;
  return mt;
}

}  // namespace fuselm::tmpl
