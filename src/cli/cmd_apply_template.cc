// fuselm apply-template: render a chat template with messages (and tools, and any other template
// variables) and print the prompt exactly, with nothing added. --batch renders many cases in one
// process (the template tests use it). --tokenize also prints the prompt's ids, encoded as every
// chat entry point encodes a rendered template (nothing added: the template writes its own BOS).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/model_tokenizer.h"
#include "template/chat_template.h"

namespace fuselm::cli {
namespace {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct ApplyTemplateArgs {
  std::string model_dir;
  std::string template_file;
  std::string template_name;
  std::string messages_file;
  bool batch = false;
  bool tokenize = false;
};

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot read");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// A --messages value as template variables: a list is the messages; an object is used as is.
ojson variables_of(const ojson& j, const std::string& where) {
  if (j.is_array()) return ojson{{"messages", j}};
  if (j.is_object()) return j;
  throw std::runtime_error(where + ": expected a list of messages or an object with \"messages\"");
}

struct Source {
  std::string text;
  std::string bos, eos;
};

/// The template to render: --template FILE, else the model's own; bos/eos from the model if any.
Source resolve(const ApplyTemplateArgs& a, bool with_tools) {
  Source s;
  const bool have_model = !a.model_dir.empty() || a.template_file.empty();
  fs::path dir;
  if (have_model) {
    dir = model_dir_of(a.model_dir);
    if (!fs::is_directory(dir)) throw std::runtime_error(dir.string() + ": no such model directory");
    std::tie(s.bos, s.eos) = tmpl::find_bos_eos_tokens(dir);  // also for a --template FILE
    auto mt = a.template_file.empty() ? tmpl::find_model_template(dir, a.template_name, with_tools) : std::nullopt;
    if (mt) {
      s.text = mt->source;
    } else if (a.template_file.empty()) {
      throw std::runtime_error(dir.string() + ": the model has no chat template (chat_template.jinja or tokenizer_config.json "
                               "chat_template); give one with --template FILE");
    }
  }
  if (!a.template_file.empty()) s.text = read_text(a.template_file);
  return s;
}

std::string render_case(const Source& src, ojson vars) {
  if (!src.bos.empty() && !vars.contains("bos_token")) vars["bos_token"] = src.bos;
  if (!src.eos.empty() && !vars.contains("eos_token")) vars["eos_token"] = src.eos;
  return tmpl::render(src.text, vars);
}

bool has_tools(const ojson& vars) { return vars.contains("tools") && !vars["tools"].is_null(); }

ojson parse_file(const std::string& path) {
  try {
    return ojson::parse(read_text(path));
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(path + ": invalid JSON: " + e.what());
  }
}

void run_batch(const ApplyTemplateArgs& a) {
  ojson cases = parse_file(a.messages_file);
  if (!cases.is_array()) throw std::runtime_error(a.messages_file + ": --batch expects a JSON list of cases");
  std::unique_ptr<Source> shared;
  ojson results = ojson::array();
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const std::string where = a.messages_file + ": case " + std::to_string(k);
    if (!c.is_object() || !c.contains("variables")) throw std::runtime_error(where + ": expected {\"variables\": ..., \"template\"?: str}");
    ojson vars = variables_of(c["variables"], where);
    ojson r = ojson::object();
    try {
      Source src;
      if (c.contains("template")) {
        src.text = c["template"].get<std::string>();
      } else {
        if (!shared) shared = std::make_unique<Source>(resolve(a, has_tools(vars)));
        src = *shared;
      }
      r["output"] = render_case(src, vars);
    } catch (const tmpl::TemplateError& e) {
      r["error"] = e.what();
    }
    results.push_back(std::move(r));
  }
  std::string out = results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace

void add_apply_template_command(CLI::App& app) {
  auto a = std::make_shared<ApplyTemplateArgs>();
  auto* cmd = app.add_subcommand("apply-template",
                                 "Render a chat template with messages and print the prompt exactly (as transformers' apply_chat_template)");
  cmd->add_option("model_dir,-m,--model", a->model_dir, "model directory whose chat template and bos/eos tokens to use; default: SmolLM2-135M-Instruct");
  cmd->add_option("--template", a->template_file, "Jinja template file to render instead of the model's");
  cmd->add_option("--template-name", a->template_name, "pick a named template of tokenizer_config.json (default, tool_use, ...)");
  cmd->add_option("--messages", a->messages_file,
                  "JSON file: a list of messages, or an object with messages, tools, add_generation_prompt and other variables")
      ->required();
  cmd->add_flag("--batch", a->batch,
                "the JSON file is a list of {\"variables\": ..., \"template\"?: source}; print a JSON list of {\"output\"} or {\"error\"}");
  auto* tokenize = cmd->add_flag("--tokenize", a->tokenize,
                                 "print {\"prompt\": text, \"ids\": [...]}: the ids as generate --chat, chat and serve encode "
                                 "the prompt (with the model's tokenizer; no special tokens added)");
  tokenize->excludes(cmd->get_option("--batch"));
  cmd->callback([a] {
    if (a->batch) return run_batch(*a);
    ojson vars = variables_of(parse_file(a->messages_file), a->messages_file);
    std::string out = render_case(resolve(*a, has_tools(vars)), vars);
    if (a->tokenize) {
      const auto ids = prompt_tokenizer_of(a->model_dir).encode_rendered(out);
      out = ojson{{"prompt", out}, {"ids", ids}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
  });
}

}  // namespace fuselm::cli
