#include "cli/model_args.h"

#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "engine/capture_runner.h"
#include "fusers/plan.h"

namespace fuselm::cli {
namespace fs = std::filesystem;

void add_model_options(CLI::App& cmd, ModelArgs& a) {
  cmd.add_option("model_dir", a.model_dir,
                 "Hugging Face model directory (config.json, *.safetensors, tokenizer.json); default: SmolLM2-135M-Instruct");
  cmd.add_option("--dtype", a.dtype, "weight storage: auto (as in the checkpoint), f32 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  cmd.add_option("--max-context", a.max_context, "KV cache tokens (default: the model's context length)")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  cmd.add_flag("--no-capture", a.no_capture, "fail instead of capturing when the IR is missing or stale");
  cmd.add_flag("--trust-remote-code", a.trust_remote_code,
               "let capture run the Python files the model directory ships (config.json auto_map)");
  cmd.add_flag("--allow-unused-weights", a.allow_unused_weights,
               "run although the checkpoint holds numbered blocks (layers, experts) beyond those the graph reads");
  add_fuser_options(cmd, a.fusers);
}

void add_fuser_options(CLI::App& cmd, FuserArgs& a) {
  cmd.add_flag("--no-fuse", a.no_fuse, "run the captured graph as is, without fusers");
  std::string names;
  for (const auto* f : fusers::registry()) names += (names.empty() ? "" : ", ") + std::string(f->name());
  cmd.add_option("--disable-fuser", a.disabled, "turn one fuser off by name (repeatable): " + names)
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

fs::path default_model_dir() {
  fs::path dir = engine::source_dir() / "models" / "SmolLM2-135M-Instruct";
  if (fs::exists(dir / "config.json")) return dir;
  std::fprintf(stderr, "fuselm: preparing the default model (one-time)\n");
  std::string cmd = fmt::format("PYTHONPATH='{}/python' '{}' -m fuselm_capture.prepare_default --out '{}' >/dev/null",
                                engine::source_dir().string(), engine::capture_python(), dir.string());
  if (std::system(cmd.c_str()) != 0)
    throw std::runtime_error("could not prepare the default model; run scripts/prepare_default_model.sh");
  return dir;
}

LoadedModel load_model(const ModelArgs& a) {
  using clock = std::chrono::steady_clock;
  fs::path dir = a.model_dir.empty() ? default_model_dir() : fs::path(a.model_dir);
  if (!fs::exists(dir)) throw std::runtime_error(dir.string() + ": no such model directory");
  if (!fs::is_directory(dir)) throw std::runtime_error(dir.string() + ": not a directory (give a Hugging Face model directory)");
  fs::path ir_dir = engine::ensure_ir(dir, !a.no_capture, a.trust_remote_code);
  auto t0 = clock::now();
  std::fprintf(stderr, "fuselm: loading %s\n", dir.c_str());
  engine::ModelOptions mo;
  mo.dtype = weights::parse_dtype_policy(a.dtype);
  mo.kv_tokens = a.max_context;
  mo.kv_cache_bytes = a.kv_cache_bytes;
  mo.kv_max_seqs = a.kv_max_seqs;
  mo.fusers = a.fusers.options();
  mo.allow_unused_weights = a.allow_unused_weights;
  LoadedModel out;
  out.model = engine::Model::load(dir, ir_dir, mo);
  if (fs::exists(dir / "tokenizer.json")) out.tokenizer.emplace(tokenizer::Tokenizer::from_file((dir / "tokenizer.json").string()));
  std::fprintf(stderr, "fuselm: loaded %zu graph nodes, %.1f MB of weights in %.2f s\n", out.model->graph().nodes.size(),
               out.model->weight_bytes() / 1e6, std::chrono::duration<double>(clock::now() - t0).count());
  if (a.fusers.no_fuse) {
    std::fprintf(stderr, "fuselm: fusers off (--no-fuse)\n");
  } else {
    std::string line;
    for (const auto& [name, t] : out.model->fusion_report().totals)
      if (t.second > 0)  // fusers with no candidate module in this model say nothing
        line += fmt::format("{}{} {}/{}", line.empty() ? "" : ", ", name, t.first, t.second);
    if (line.empty()) line = "nothing";
    std::fprintf(stderr, "fuselm: fused %s (fuselm inspect shows each module)\n", line.c_str());
  }
  return out;
}

}  // namespace fuselm::cli
