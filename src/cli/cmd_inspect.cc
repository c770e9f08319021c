// fuselm inspect: run the fusers over a model's captured graph and print, per module, every fusion
// and every fallback with its reason, and totals per fuser. Loads no weights.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "passes/shard_plan.h"
#include "engine/capture_runner.h"
#include "engine/model.h"
#include "engine/state_ops.h"
#include "fusers/plan.h"
#include "ir/load.h"

namespace fuselm::cli {
namespace {
namespace fs = std::filesystem;

struct InspectArgs {
  std::string model_dir;
  bool json = false;
  bool no_capture = false;
  int tensor_parallel_size = 1;
  bool trust_remote_code = false;
  FuserArgs fusers;
};

// A Hugging Face model dir (captured when needed), or any dir holding fuselm-ir/ir.json (a module
// captured by fuselm_capture.capture_module, with its checkpoint).
fs::path ir_dir_of(const InspectArgs& a) {
  fs::path dir = model_dir_of(a.model_dir);
  if (!fs::is_directory(dir)) throw std::runtime_error(dir.string() + ": no such model directory");
  if (fs::exists(dir / "config.json")) return engine::ensure_ir(dir, !a.no_capture, a.trust_remote_code);
  if (fs::exists(dir / "fuselm-ir" / "ir.json")) return dir / "fuselm-ir";
  throw std::runtime_error(dir.string() + ": neither a Hugging Face model directory (config.json) nor a captured one (fuselm-ir/ir.json)");
}

// The KV cache the engine would allocate for the rewritten graph (f32 rows, kv/paged_kv_cache.h):
// per layer "latent" (one [latent | rope key] row, fuselm.mla_attention) or "kv" (K and V rows).
// With latent layers, also what the captured graph's full attention would take
// (fallback_bytes_per_token) and that with V padded to the Q/K head size, as engines whose kernels
// need equal head sizes store it (padded_fallback_bytes_per_token).
nlohmann::json kv_cache_json(const ir::Graph& g, const ir::Graph& captured) {
  nlohmann::json j;
  try {
    const auto layers = engine::attention_layer_shapes(g);
    bool latent = false;
    for (const auto& l : layers) latent = latent || (l.k_width > 0 && l.v_width == 0);
    if (latent) {
      int64_t full = 0, padded = 0;
      for (const auto& l : engine::attention_layer_shapes(captured)) {
        full += (l.k_width + l.v_width) * int64_t{sizeof(float)};
        padded += 2 * std::max(l.k_width, l.v_width) * int64_t{sizeof(float)};
      }
      j["fallback_bytes_per_token"] = full;
      j["padded_fallback_bytes_per_token"] = padded;
    }
    int64_t total = 0;
    j["layers"] = nlohmann::json::array();
    for (size_t i = 0; i < layers.size(); ++i) {
      const int64_t bytes = (layers[i].k_width + layers[i].v_width) * int64_t{sizeof(float)};
      total += bytes;
      j["layers"].push_back({{"layer", i},
                             {"kind", layers[i].k_width == 0 ? "none" : layers[i].v_width == 0 ? "latent" : "kv"},
                             {"k_width", layers[i].k_width},
                             {"v_width", layers[i].v_width},
                             {"bytes_per_token", bytes}});
    }
    j["dtype"] = "f32";
    j["bytes_per_element"] = sizeof(float);
    j["bytes_per_token"] = total;
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
  return j;
}

// The stateful (recurrent) ops the engine keeps a per-sequence state for (docs/recurrent.md): each
// op's kind, module and f32 state bytes per sequence, and the total (one state slot's bytes).
nlohmann::json state_json(const ir::Graph& g) {
  nlohmann::json j;
  try {
    int64_t total = 0;
    j["ops"] = nlohmann::json::array();
    for (const auto& s : engine::stateful_ops(g)) {
      const int64_t bytes = s.floats * int64_t{sizeof(float)};
      total += bytes;
      j["ops"].push_back({{"state_idx", s.state_idx}, {"op", s.op}, {"module", s.module}, {"bytes_per_sequence", bytes}});
    }
    j["bytes_per_sequence"] = total;
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
  return j;
}

// Under tensor parallelism the stateful ops have no tensor-parallel rule (ir::OpTraits::tp), so no
// split value reaches them: every rank runs each recurrent mixer whole and holds its whole state.
void print_state(const nlohmann::json& st, int64_t tp_size) {
  if (st.contains("error")) {
    std::printf("state: %s\n", st["error"].get<std::string>().c_str());
    return;
  }
  if (st["ops"].empty()) return;
  std::printf("state: %zu stateful ops, %lld bytes per sequence (f32)%s\n", st["ops"].size(),
              static_cast<long long>(st["bytes_per_sequence"].get<int64_t>()),
              tp_size > 1 ? "; tensor parallel: each op and its state whole on every rank (replicated)" : "");
  for (const auto& op : st["ops"])
    std::printf("  state %lld: %s in %s: %lld bytes\n", static_cast<long long>(op["state_idx"].get<int64_t>()),
                op["op"].get<std::string>().c_str(), op["module"].get<std::string>().c_str(),
                static_cast<long long>(op["bytes_per_sequence"].get<int64_t>()));
}

void run(const InspectArgs& a) {
  const fs::path ir_dir = ir_dir_of(a);
  const ir::Graph g = ir::load(ir_dir / "ir.json");
  auto plan = fusers::apply(g, a.fusers.options());
  // Rank 0's plan under --tensor-parallel-size N: what is sharded, what is replicated and why.
  std::string tp;
  if (a.tensor_parallel_size > 1 && plan.report.errors.empty())
    tp = passes::format_shard_plan(passes::shard_plan(plan, a.tensor_parallel_size, 0));
  const auto kv = kv_cache_json(plan.graph, g);
  const auto state = state_json(plan.graph);
  if (a.json) {
    auto j = fusers::report_json(plan.report);
    j["ir"] = (ir_dir / "ir.json").string();
    j["kv_cache"] = kv;
    j["state"] = state;
    if (a.tensor_parallel_size > 1 && !state.contains("error") && !state["ops"].empty())
      j["state"]["tensor_parallel"] = "replicated";
    if (!tp.empty()) j["tensor_parallel"] = tp;
    std::puts(j.dump(1).c_str());
  } else {
    std::printf("ir: %s\n", (ir_dir / "ir.json").c_str());  // the model dir's, or the cache's (read-only dirs)
    std::fputs(fusers::format_report(plan.report).c_str(), stdout);
    std::fputs(tp.c_str(), stdout);
    if (kv.contains("bytes_per_token")) {
      int latent = 0, none = 0;
      for (const auto& l : kv["layers"]) latent += l["kind"] == "latent", none += l["kind"] == "none";
      const auto bytes = kv["bytes_per_token"].get<int64_t>();
      std::printf("kv cache: %lld bytes per token (f32) over %zu layers, %d of them latent", static_cast<long long>(bytes),
                  kv["layers"].size() - none, latent);
      if (none) std::printf(", and %d layer indices without attention (recurrent layers)", none);
      std::printf("\n");
      if (kv.contains("fallback_bytes_per_token")) {
        const auto full = kv["fallback_bytes_per_token"].get<int64_t>();
        const auto padded = kv["padded_fallback_bytes_per_token"].get<int64_t>();
        std::printf("  full attention would take %lld (%.1fx), with V padded to the Q/K head size %lld (%.1fx)\n",
                    static_cast<long long>(full), static_cast<double>(full) / static_cast<double>(bytes),
                    static_cast<long long>(padded), static_cast<double>(padded) / static_cast<double>(bytes));
      }
    }
    print_state(state, a.tensor_parallel_size);
  }
  if (!plan.report.errors.empty() || state.contains("error")) set_exit_code(1);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect", "Show which fusers apply to each module of a model, and why others do not");
  cmd->add_option("model_dir,-m,--model", a->model_dir,
                  "model directory (Hugging Face, or holding fuselm-ir/ir.json); default: SmolLM2-135M-Instruct");
  cmd->add_flag("--json", a->json, "print one JSON object: modules, totals, errors");
  cmd->add_flag("--no-capture", a->no_capture, "fail instead of capturing when the IR is missing or stale");
  cmd->add_option("--tensor-parallel-size", a->tensor_parallel_size,
                  "also show the sharding plan for N ranks (rank 0's; per-rank KV cache)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--trust-remote-code", a->trust_remote_code,
                "let capture run the Python files the model directory ships (config.json auto_map)");
  add_fuser_options(*cmd, a->fusers);
  cmd->callback([a] { run(*a); });
}

}  // namespace fuselm::cli
