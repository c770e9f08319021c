// fuselm verify: run a real checkpoint in the engine and in transformers on fixed prompts and
// compare greedy tokens and every logits row, under a tolerance rule per weight type
// (docs/verify.md). The engine runs first (this process), then the model is freed and
// python/fuselm_capture/verify.py loads the same file in transformers and measures the rows.
#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string_view>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/verify_prompts.h"
#include "cli/verify_stamp.h"
#include "engine/capture_runner.h"
#include "engine/generator.h"

namespace fuselm::cli {
namespace {
namespace fs = std::filesystem;

struct VerifyArgs {
  ModelArgs model;
  std::string prompts_file;
  bool json = false;
  int64_t max_tokens = 8;
};

/// A tolerance rule: which bounds hold for a weight type (docs/verify.md has the measurements).
/// exact: every row within max_rel x max|logit| of the row, and every top-1 disagreement a tie.
struct Rule {
  std::string name;
  bool exact = false;
  double max_rel = 0, min_top1 = 0, max_kld_mean = 0, max_kld_max = 0;
};

// Ties: transformers' own two logits within this share of the row's max |logit| (fp32 rounding).
constexpr double kTieRel = 1e-3;

/// The rule for the weights as the engine holds them (Model::weight_types(): "Q4_0 77% F32 1%")
/// and the reference's dtype. Block types are ggml's; any of them makes the model quantized.
Rule rule_for(const std::string& weight_types, const std::string& reference_dtype) {
  std::istringstream in(weight_types);
  bool only_f32 = true, only_dense = true;
  for (std::string type, share; in >> type >> share;) {
    only_f32 = only_f32 && type == "F32";
    only_dense = only_dense && (type == "F32" || type == "BF16" || type == "F16");
  }
  if (!only_dense) return {"quantized", false, 0, 0.90, 0.05, 2.0};
  if (!only_f32 || reference_dtype != "float32") return {"16-bit", false, 0, 0.97, 0.01, 0.5};
  return {"f32 exact", true, kTieRel, 0, 0, 0};
}

/// A temporary directory, removed with everything in it when this goes out of scope.
struct WorkDir {
  fs::path path;
  WorkDir() {
    std::string tmpl = (fs::temp_directory_path() / "fuselm-verify-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error(tmpl + ": cannot create a temporary directory");
    path = tmpl;
  }
  ~WorkDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

/// Runs every prompt greedily through the engine: the logits rows go to work/p<i>.f32, the request
/// for the reference side to work/request.json. Returns the weight types of the loaded model.
std::string run_engine(const VerifyArgs& a, const fs::path& dir, const fs::path& work) {
  auto loaded = load_model(a.model);
  auto& model = *loaded.model;
  const int64_t max_prompt = model.max_context() - a.max_tokens;
  if (max_prompt < 1)
    throw std::runtime_error(fmt::format("--max-tokens {} leaves no room for a prompt in a context of {}",
                                         a.max_tokens, model.max_context()));
  const tokenizer::PromptTokenizer* tok = loaded.tokenizer ? &*loaded.tokenizer : nullptr;
  const auto prompts = a.prompts_file.empty()
                           ? builtin_prompts(tok, model.vocab_size(), attention_window(model.graph()), max_prompt)
                           : prompts_from_file(a.prompts_file, tok, model.vocab_size(), max_prompt);
  nlohmann::json req;
  req["model_dir"] = fs::absolute(dir).string();
  req["vocab_size"] = model.vocab_size();
  req["tie_tol"] = kTieRel;
  req["trust_remote_code"] = a.model.trust_remote_code;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string file = fmt::format("p{}.f32", i);
    std::FILE* f = std::fopen((work / file).c_str(), "wb");
    if (!f) throw std::runtime_error((work / file).string() + ": cannot write");
    engine::GenerateRequest gr;
    gr.prompt_ids = prompts[i].ids;
    gr.max_tokens = a.max_tokens;
    gr.sampling.temperature = 0.f;  // greedy
    gr.stop_at_eos = false;         // every prompt gives max_tokens rows to compare
    auto res = engine::generate(model, gr, {}, [f](std::span<const float> row) {
      std::fwrite(row.data(), sizeof(float), row.size(), f);
    });
    const bool ok = std::ferror(f) == 0;
    std::fclose(f);
    if (!ok) throw std::runtime_error((work / file).string() + ": write failed (disk full?)");
    req["prompts"].push_back({{"name", prompts[i].name}, {"prompt_ids", prompts[i].ids},
                              {"token_ids", res.token_ids}, {"logits", file}});
    std::fprintf(stderr, "fuselm verify: prompt %zu/%zu (%s) run in the engine\n", i + 1, prompts.size(),
                 prompts[i].name.c_str());
  }
  std::ofstream(work / "request.json") << req.dump();
  return model.weight_types();
}  // the model is freed here, before transformers loads its copy

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// python -m fuselm_capture.verify WORK: its progress lines go to stderr, its one error line
/// becomes our error. Returns work/reference.json.
nlohmann::json run_reference(const fs::path& work) {
  const std::string cmd = fmt::format("PYTHONPATH={} {} -m fuselm_capture.verify {} 2>&1 </dev/null",
                                      shell_quote((engine::source_dir() / "python").string()),
                                      shell_quote(engine::capture_python()), shell_quote(work.string()));
  std::fflush(stderr);
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot start " + engine::capture_python() + " for the transformers reference");
  constexpr std::string_view kError = "fuselm verify: error: ";
  std::string error;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) {
    std::string_view line(buf);
    if (line.starts_with(kError)) error = std::string(line.substr(kError.size()));
    else std::fputs(buf, stderr);
  }
  const int status = ::pclose(pipe);
  while (!error.empty() && (error.back() == '\n' || error.back() == '\r')) error.pop_back();
  if (!error.empty()) throw std::runtime_error("transformers reference: " + error);
  if (status != 0 || !fs::exists(work / "reference.json"))
    throw std::runtime_error(fmt::format("transformers reference failed (exit status {}; see above)",
                                         WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  std::ifstream in(work / "reference.json");
  return nlohmann::json::parse(in);
}

/// The figures over every prompt's rows: top-1 share, KLD mean and max, worst relative logit diff.
nlohmann::json totals(const nlohmann::json& prompts) {
  double rows = 0, top1 = 0, ties = 0, kld_sum = 0, kld_max = 0, max_abs = 0, max_rel = 0;
  for (const auto& p : prompts) {
    const double n = p["rows"].get<double>();
    rows += n;
    top1 += p["top1"].get<double>();
    ties += p["ties"].get<double>();
    kld_sum += p["kld_mean"].get<double>() * n;
    kld_max = std::max(kld_max, p["kld_max"].get<double>());
    max_abs = std::max(max_abs, p["max_abs"].get<double>());
    max_rel = std::max(max_rel, p["max_rel"].get<double>());
  }
  return {{"rows", rows}, {"top1", top1 / rows}, {"ties", ties}, {"kld_mean", kld_sum / rows}, {"kld_max", kld_max},
          {"max_abs", max_abs}, {"max_rel", max_rel}, {"disagree", rows - top1 - ties}};
}

/// Why the totals break the rule (empty: they keep it).
std::vector<std::string> violations(const Rule& r, const nlohmann::json& t) {
  std::vector<std::string> out;
  if (r.exact) {
    if (t["max_rel"].get<double>() > r.max_rel)
      out.push_back(fmt::format("max |Δlogit| / max |logit| of a row is {:.2g} (bound {:.0e})", t["max_rel"].get<double>(), r.max_rel));
    if (t["disagree"].get<double>() > 0)
      out.push_back(fmt::format("{} rows pick another top-1 token where transformers' logits are no tie",
                                t["disagree"].get<double>()));
    return out;
  }
  if (t["top1"].get<double>() < r.min_top1)
    out.push_back(fmt::format("top-1 agreement {:.1f}% < {:.0f}%", 100 * t["top1"].get<double>(), 100 * r.min_top1));
  if (t["kld_mean"].get<double>() > r.max_kld_mean)
    out.push_back(fmt::format("mean KLD {:.4f} > {}", t["kld_mean"].get<double>(), r.max_kld_mean));
  if (t["kld_max"].get<double>() > r.max_kld_max)
    out.push_back(fmt::format("max KLD {:.4f} > {}", t["kld_max"].get<double>(), r.max_kld_max));
  return out;
}

std::string rule_text(const Rule& r) {
  if (r.exact) return fmt::format("{}: every row within {:.0e} x max|logit|, top-1 equal but for ties", r.name, r.max_rel);
  return fmt::format("{}: top-1 >= {:.0f}%, KLD mean <= {}, max <= {}", r.name, 100 * r.min_top1, r.max_kld_mean,
                     r.max_kld_max);
}

void print_text(const nlohmann::json& report, const Rule& rule, const std::vector<std::string>& why) {
  for (const auto& p : report["prompts"])
    std::printf("%-28s top-1 %4d/%-4d (%5.1f%%)  greedy %d/%d  KLD mean %.2e max %.2e  max|Δlogit| %.3g (%.1e rel)\n",
                p["name"].get<std::string>().c_str(), p["top1"].get<int>(), p["rows"].get<int>(),
                100.0 * p["top1"].get<double>() / p["rows"].get<double>(), p["greedy"].get<int>(),
                p["generated"].get<int>(), p["kld_mean"].get<double>(), p["kld_max"].get<double>(),
                p["max_abs"].get<double>(), p["max_rel"].get<double>());
  const auto& t = report["totals"];
  const auto& ref = report["reference"];
  const std::string what = fmt::format("weights {} against transformers {} ({}): {} rows, top-1 {:.1f}%, KLD mean {:.2e} max "
                                       "{:.2e}, max|Δlogit| {:.3g}",
                                       report["weights"].get<std::string>(), ref["transformers"].get<std::string>(),
                                       ref["dtype"].get<std::string>(), t["rows"].get<double>(),
                                       100 * t["top1"].get<double>(), t["kld_mean"].get<double>(),
                                       t["kld_max"].get<double>(), t["max_abs"].get<double>());
  if (why.empty()) {
    std::printf("verify: PASS (%s); %s\n", rule_text(rule).c_str(), what.c_str());
    return;
  }
  std::string reasons;
  for (const auto& w : why) reasons += (reasons.empty() ? "" : "; ") + w;
  std::printf("verify: FAIL (%s): %s; %s\n", rule_text(rule).c_str(), reasons.c_str(), what.c_str());
  std::printf("verify: fuselm does not compute what transformers computes from this checkpoint. %s"
              "file a bug with this output and the checkpoint's name (docs/verify.md).\n",
              rule.name == "quantized" ? "Run `fuselm verify MODEL --dtype f32`: if that passes, the quantized kernels "
                                         "are at fault, else the loader or graph; "
                                       : "Do not trust this model's output; ");
}

void run(const VerifyArgs& a) {
  if (a.model.dtype == "q8_0" || a.model.dtype == "q4_0")
    throw std::runtime_error("--dtype " + a.model.dtype + " requantizes the weights, which transformers does not: "
                             "verify compares the checkpoint's own weights; use --dtype auto, f32 or bf16");
  if (a.model.tensor_parallel_size > 1) throw std::runtime_error("verify runs on one rank; drop --tensor-parallel-size");
  const fs::path dir = model_dir_of(a.model.model_dir);
  WorkDir work;
  const std::string types = run_engine(a, dir, work.path);
  nlohmann::json report = run_reference(work.path);
  nlohmann::json req = nlohmann::json::parse(std::ifstream(work.path / "request.json"));
  for (size_t i = 0; i < report["prompts"].size(); ++i) {
    report["prompts"][i]["name"] = req["prompts"][i]["name"];
    report["prompts"][i]["prompt_tokens"] = req["prompts"][i]["prompt_ids"].size();
  }
  const Rule rule = rule_for(types, report["reference"]["dtype"].get<std::string>());
  report["weights"] = types;
  report["dtype"] = a.model.dtype;
  report["totals"] = totals(report["prompts"]);
  const auto why = violations(rule, report["totals"]);
  report["rule"] = rule_text(rule);
  report["verdict"] = why.empty() ? "pass" : "fail";
  report["reasons"] = why;
  if (a.json) std::puts(report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  else print_text(report, rule, why);
  std::fflush(stdout);
  if (why.empty()) {
    record_verify_pass(dir, {{"dtype", a.model.dtype}, {"weights", types}, {"rule", report["rule"]},
                             {"totals", report["totals"]}, {"reference", report["reference"]}});
  } else {
    set_exit_code(1);
  }
}

}  // namespace

void add_verify_command(CLI::App& app) {
  auto a = std::make_shared<VerifyArgs>();
  auto* cmd = app.add_subcommand("verify", "Compare a checkpoint's greedy tokens and logits with transformers' (docs/verify.md)");
  add_model_options(*cmd, a->model);
  cmd->add_option("--prompts", a->prompts_file, "JSON array of prompts: texts or arrays of token ids (default: built-in)");
  cmd->add_option("--max-tokens", a->max_tokens, "tokens generated greedily per prompt")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", a->json, "print one JSON object with every figure and the verdict");
  cmd->callback([a] { run(*a); });
}

}  // namespace fuselm::cli
