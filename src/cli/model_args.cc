#include "cli/model_args.h"
#include "cli/model_tokenizer.h"

#include <fmt/core.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "engine/capture_runner.h"
#include "engine/ir_cache.h"
#include "engine/tp_session.h"
#include "fusers/plan.h"

namespace fuselm::cli {
namespace fs = std::filesystem;

void add_model_options(CLI::App& cmd, ModelArgs& a) {
  cmd.add_option("model_dir,-m,--model", a.model_dir,
                 "Hugging Face model directory (config.json, *.safetensors, tokenizer.json), a .gguf file or a directory holding one; default: SmolLM2-135M-Instruct");
  cmd.add_option("--dtype", a.dtype, "weight storage: auto (as in the checkpoint or GGUF), f32, bf16, or q8_0/q4_0 (linear weights quantized at load)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "f32", "bf16", "q8_0", "q4_0"}));
  cmd.add_option("--max-context", a.max_context, "KV cache tokens (default: the model's context length)")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  cmd.add_flag("--no-capture", a.no_capture, "fail instead of capturing when the IR is missing or stale");
  cmd.add_flag("--trust-remote-code", a.trust_remote_code,
               "let capture run the Python files the model directory ships (config.json auto_map)");
  cmd.add_flag("--allow-unused-weights", a.allow_unused_weights,
               "run although the checkpoint holds numbered blocks (layers, experts) beyond those the graph reads");
  add_fuser_options(cmd, a.fusers);
  cmd.add_option("--tensor-parallel-size", a.tensor_parallel_size,
                 "split the model over N ranks of an MPI job (mpirun -np N fuselm ...); docs/tensor-parallel.md")
      ->check(CLI::Range(1, 1 << 16));
  cmd.add_option("-t,--threads", a.threads, "compute threads of the kernels (default: OMP_NUM_THREADS, else one per core)")
      ->check(CLI::Range(1, 1 << 16));
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

namespace {

// The one .gguf a directory without config.json holds, or nullopt.
std::optional<fs::path> lone_gguf(const fs::path& dir) {
  if (!fs::is_directory(dir) || fs::exists(dir / "config.json")) return std::nullopt;
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".gguf") found.push_back(e.path());
  if (found.size() > 1)
    throw std::runtime_error(dir.string() + ": holds " + std::to_string(found.size()) + " .gguf files; name one");
  if (found.empty()) return std::nullopt;
  return found.front();
}

}  // namespace

fs::path gguf_model_dir(const fs::path& gguf) {
  const fs::path abs = fs::absolute(gguf).lexically_normal();
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the path: one directory per file
  for (unsigned char c : abs.string()) h = (h ^ c) * 1099511628211ull;
  const fs::path dir = engine::cache_root() / "gguf" / fmt::format("{}-{:016x}", abs.stem().string(), h);
  // Its notes stream to stderr; its one error line (it names the file) becomes ours.
  const std::string failed = engine::run_python_module("fuselm_capture.gguf_dir", {abs.string(), "--out", dir.string()},
                                                       "fuselm: error: ", true);
  if (!failed.empty()) throw std::runtime_error(failed);
  return dir;
}

void set_kv_cache_dtype(ModelArgs& a, const std::string& name) {
  a.kv_dtype_auto = name == "auto";
  if (!a.kv_dtype_auto) a.kv_dtype = kv::parse_kv_dtype(name);
}

fs::path model_dir_of(const std::string& model) {
  if (model.empty()) return default_model_dir();
  const fs::path p(model);
  if (p.extension() == ".gguf" && fs::is_regular_file(p)) return gguf_model_dir(p);
  if (auto g = lone_gguf(p)) return gguf_model_dir(*g);
  return p;
}

LoadedModel load_model(const ModelArgs& a) {
  using clock = std::chrono::steady_clock;
  fs::path dir = model_dir_of(a.model_dir);
  if (!fs::exists(dir)) throw std::runtime_error(dir.string() + ": no such model directory");
  if (!fs::is_directory(dir)) throw std::runtime_error(dir.string() + ": not a directory (give a Hugging Face model directory)");
  fs::path ir_dir = engine::ensure_ir(dir, !a.no_capture, a.trust_remote_code);
  if (const int64_t read_at = engine::sequence_length_context(ir_dir); a.max_context > 0 && a.max_context < read_at) {
    // The model picks something (a length-dependent RoPE) by its sequence length, captured at
    // read_at tokens; a smaller served context may pick otherwise, as vLLM's max_model_len and
    // llama.cpp's -c do, so the model is captured for it (once; its own IR directory).
    std::fprintf(stderr, "fuselm: the model reads its sequence length (docs/ir.md); --max-context %lld: its IR "
                 "for that context\n", static_cast<long long>(a.max_context));
    ir_dir = engine::ensure_ir(dir, !a.no_capture, a.trust_remote_code, a.max_context);
  }
  auto t0 = clock::now();
  if (a.threads > 0) omp_set_num_threads(a.threads);
  std::fprintf(stderr, "fuselm: loading %s (%d compute threads)\n", dir.c_str(), omp_get_max_threads());
  engine::ModelOptions mo;
  mo.dtype = weights::parse_dtype_policy(a.dtype);
  mo.kv_tokens = a.max_context;
  mo.kv_cache_bytes = a.kv_cache_bytes;
  mo.kv_max_seqs = a.kv_max_seqs;
  mo.kv_dtype = a.kv_dtype;
  mo.kv_dtype_auto = a.kv_dtype_auto;
  mo.fusers = a.fusers.options();
  mo.allow_unused_weights = a.allow_unused_weights;
  LoadedModel out;
  out.tp = std::make_unique<engine::TpSession>(a.tensor_parallel_size);
  out.tp->configure(mo);
  out.dir = dir;
  out.model = engine::Model::load(dir, ir_dir, mo);
  out.tp->attach(*out.model);  // ranks other than 0 follow rank 0's steps here and never return
  if (out.tp->size() > 1) std::fputs(out.model->shard_report().c_str(), stderr);
  out.tokenizer = load_prompt_tokenizer(dir);
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
