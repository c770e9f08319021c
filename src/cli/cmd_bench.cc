// fuselm bench: prompt processing (pp) and token generation (tg) speed in llama-bench's form
// (tools/llama-bench of llama.cpp: the same options, test names, timing and output fields), with
// the memory-bandwidth ceiling of decode next to it.
//
// Timing follows llama-bench: random token ids (BOS first at depth 0); a test at depth d first
// fills the KV cache with d tokens, untimed and once per test (llama-bench restores a saved state
// instead; both leave the first d positions as they were for every repetition); pp<n> times the
// prompt's forwards in chunks of n_ubatch tokens, tg<n> times n single-token forwards (no
// sampling); one warm-up (a pp forward, a tg step) precedes the repetitions.
#include <omp.h>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_report.h"
#include "cli/bench_speculative.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "kernels/cpu/isa.h"
#include "bench/probe.h"
#include "kv/paged_kv_cache.h"

namespace fuselm::cli {
namespace {

namespace fs = std::filesystem;

struct BenchArgs {
  std::string model_dir;
  std::vector<int64_t> n_prompt{512}, n_gen{128}, n_depth{0};
  std::vector<int> threads;
  std::vector<std::string> dtypes{"auto"};
  int reps = 5;
  int64_t n_ubatch = 512;
  std::string output = "md";
  bool no_warmup = false;
  bool no_bandwidth = false;
  int64_t bandwidth_mib = 0;  // 0: max(1 GiB, 4 x the last-level cache)
  FuserArgs fusers;
  int tensor_parallel_size = 1;  // under mpirun -np N: rank 0 benches, the others follow its steps
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype: K and V alike (llama-bench's -ctk and -ctv)
  SpeculativeArgs speculative;  // with --speculative-method: plain vs speculative decoding of --prompt-file
  std::string prompt_file;
  bool chat = false;
};

/// Bytes of the last-level cache (sysfs, the highest cache index of cpu0), 0 when unknown.
int64_t llc_bytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream in(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/size", i));
    std::string s;
    if (!(in >> s) || s.empty()) continue;
    int64_t v = std::atoll(s.c_str());
    if (s.back() == 'K') v <<= 10;
    if (s.back() == 'M') v <<= 20;
    best = std::max(best, v);
  }
  return best;
}

struct Bandwidth {
  double gbs = 0;
  std::string method;
};

/// All threads streaming a buffer far larger than the last-level cache (bench/probe.h), best of 3
/// passes in each of two read orders.
Bandwidth measure_bandwidth(const BenchArgs& a, int threads) {
  if (a.no_bandwidth) return {0, "not measured (--no-bandwidth)"};
  const int64_t llc = llc_bytes();
  const int64_t bytes = a.bandwidth_mib > 0 ? a.bandwidth_mib << 20 : std::max<int64_t>(int64_t{1} << 30, 4 * llc);
  omp_set_num_threads(threads);
  Bandwidth b;
  b.gbs = bench::measure_memory_bandwidth_gbs(static_cast<size_t>(bytes), 3);
  b.method = fmt::format("{}-thread streaming read of a {} MiB buffer, LLC {} MiB, best of 3 x 2 read orders", threads, bytes >> 20,
                         llc >> 20);
  return b;
}

/// Weight bytes one decoded token reads: Model::weight_bytes(), less all but one row of each
/// parameter read only by aten.embedding (a gather of one row per token). Element sizes are the
/// model's average (weight bytes / parameters read), exact when one storage dtype holds all.
int64_t weight_bytes_per_token(engine::Model& m, int64_t* n_params) {
  const auto& g = m.graph();
  std::vector<int> users_other(g.nodes.size(), 0), users_embed(g.nodes.size(), 0);
  for (const auto& n : g.nodes)
    for (size_t k = 0; k < n.args.size(); ++k)
      if (n.args[k].kind == ir::Arg::Kind::ref && n.args[k].ref >= 0) {
        const bool gather = (n.op == "aten.embedding.default" || n.op == "fuselm.vocab_embedding.default") && k == 0;
        (gather ? users_embed : users_other)[n.args[k].ref]++;
      }
  int64_t total = 0, gathered = 0;
  for (const auto& n : g.nodes) {
    if (n.op != "placeholder" || n.placeholder_kind != "parameter") continue;
    int64_t numel = 1;
    for (const auto& d : n.out.shape) numel *= d.value;
    total += numel;
    if (users_embed[n.index] > 0 && users_other[n.index] == 0 && !n.out.shape.empty())
      gathered += numel - numel / std::max<int64_t>(n.out.shape[0].value, 1);
  }
  *n_params = total;
  if (total == 0) return m.weight_bytes();
  const double per_elem = static_cast<double>(m.weight_bytes()) / static_cast<double>(total);
  return m.weight_bytes() - static_cast<int64_t>(per_elem * static_cast<double>(gathered));
}

/// "llama 134.52M BF16": the config's model_type (display only), parameters, dtype.
std::string model_type(const engine::Model& m, int64_t n_params, const std::string& dtype) {
  std::string type = "model";
  try {
    const auto& cj = m.graph().model.at("config_json");
    auto cfg = nlohmann::json::parse(cj.is_string() ? cj.get<std::string>() : cj.dump());
    if (cfg.contains("model_type") && cfg["model_type"].is_string()) type = cfg["model_type"];
  } catch (const std::exception&) {
  }
  std::string up = dtype;
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return fmt::format("{} {} {}", type, n_params < 1000000000 ? fmt::format("{:.0f}M", n_params / 1e6)
                                                             : fmt::format("{:.1f}B", n_params / 1e9), up);
}

/// One sequence over the model's KV cache, fed random tokens as llama-bench feeds llama_decode.
class BenchSequence {
 public:
  BenchSequence(engine::Model& m, int64_t capacity, int64_t ubatch) : m_(m), ubatch_(ubatch), rng_(1234) {
    if (!seq_.reserve(capacity, m.kv_cache()))
      throw std::runtime_error(fmt::format("the KV cache cannot hold {} tokens", capacity));
    if (kv::StatePool* st = m.state_pool()) state_.emplace(*st, st->allocate());  // a stateful model's slot
  }
  ~BenchSequence() { seq_.release(m_.kv_cache()); }
  /// Forwards n random tokens at positions start.. in chunks of n_ubatch (BOS first at 0).
  void feed(int64_t start, int64_t n) {
    for (int64_t done = 0; done < n;) {
      const int64_t chunk = std::min(ubatch_, n - done);
      ids_.resize(chunk);
      pos_.resize(chunk);
      for (int64_t i = 0; i < chunk; ++i) {
        pos_[i] = start + done + i;
        ids_[i] = static_cast<int64_t>(rng_() % static_cast<uint64_t>(m_.vocab_size()));
        if (pos_[i] == 0 && m_.bos_token_id()) ids_[i] = *m_.bos_token_id();
      }
      runtime::SequenceSlice slice{0, chunk, start + done + chunk, seq_.slots(), state_ ? state_->slot() : -1};
      // The logits of the chunk's last token only, as llama-bench's batch marks only its last
      // token as an output (common_batch_get_one): the LM head does not run on every prompt row.
      const int64_t last = chunk - 1;
      m_.forward(ids_, pos_, {&slice, 1}, std::span<const int64_t>(&last, 1));
      done += chunk;
    }
  }

 private:
  engine::Model& m_;
  int64_t ubatch_;
  std::mt19937_64 rng_;
  kv::SequenceKv seq_;
  std::optional<kv::StateLease> state_;
  std::vector<int64_t> ids_, pos_;
};

std::string now_rfc3339() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%FT%TZ", std::gmtime(&t));
  return buf;
}

/// Runs one test (row.n_prompt or row.n_gen set, row.n_depth) and fills row.samples_ns.
void run_test(engine::Model& m, const BenchArgs& a, BenchRow& row) {
  const int64_t depth = row.n_depth;
  BenchSequence seq(m, depth + std::max(row.n_prompt, row.n_gen) + 1, a.n_ubatch);
  if (depth > 0) seq.feed(0, depth);
  auto step = [&] {
    if (row.n_prompt > 0) seq.feed(depth, row.n_prompt);
    for (int64_t i = 0; i < row.n_gen; ++i) seq.feed(depth + row.n_prompt + i, 1);
  };
  if (!a.no_warmup) {
    if (row.n_prompt > 0) seq.feed(depth, row.n_prompt);
    if (row.n_gen > 0) seq.feed(depth, 1);
  }
  row.test_time = now_rfc3339();
  for (int r = 0; r < a.reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    row.samples_ns.push_back(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  }
}

/// Every test of one weight dtype: threads x depth x (pp tests, then tg tests), as llama-bench.
void bench_dtype(const BenchArgs& a, const std::string& dtype, bool first, BenchPrinter& out,
                 std::vector<BenchRow>& rows) {
  int64_t longest = 0;
  for (int64_t d : a.n_depth)
    for (int64_t n : a.n_prompt) longest = std::max(longest, d + n + 1);
  for (int64_t d : a.n_depth)
    for (int64_t n : a.n_gen) longest = std::max(longest, d + n + 1);
  ModelArgs ma;
  ma.model_dir = a.model_dir;
  ma.dtype = dtype;
  ma.fusers = a.fusers;
  ma.tensor_parallel_size = a.tensor_parallel_size;
  ma.max_context = longest + 16;  // the KV cache holds the longest test only
  set_kv_cache_dtype(ma, a.kv_cache_dtype);
  auto loaded = load_model(ma);
  if (first) out.header();
  engine::Model& m = *loaded.model;
  if (longest > m.max_context())
    throw std::runtime_error(fmt::format("a test needs {} positions but the model's context is {} (lower -d, -p or -n)",
                                         longest, m.max_context()));
  int64_t n_params = 0;
  const int64_t per_token = weight_bytes_per_token(m, &n_params);
  for (int t : a.threads) {
    const Bandwidth bw = measure_bandwidth(a, t);
    omp_set_num_threads(t);
    for (int64_t d : a.n_depth) {
      std::vector<std::pair<int64_t, int64_t>> tests;  // (n_prompt, n_gen)
      for (int64_t n : a.n_prompt)
        if (n > 0) tests.push_back({n, 0});
      for (int64_t n : a.n_gen)
        if (n > 0) tests.push_back({0, n});
      for (const auto& [np, ng] : tests) {
        BenchRow row;
        row.model_filename = a.model_dir.empty() ? default_model_dir().string() : a.model_dir;
        row.model_type = model_type(m, n_params, dtype);
        row.model_size = m.weight_bytes();
        row.model_n_params = n_params;
        row.n_batch = std::max(np, int64_t{1});
        row.n_ubatch = a.n_ubatch;
        row.n_threads = t;
        row.type_k = row.type_v = kv::kv_dtype_name(m.kv_cache().dtype());
        row.n_prompt = np;
        row.n_gen = ng;
        row.n_depth = d;
        row.weight_dtype = dtype;
        row.weight_types = m.weight_types();
        row.isa = kernels::isa_name(kernels::cpu_isa());
        row.weight_bytes_per_token = per_token;
        row.kv_bytes_per_token = ng > 0 ? m.kv_cache().bytes_per_token() * (d + ng / 2) : 0;
        row.mem_bw_gbs = bw.gbs;
        row.mem_bw_method = bw.method;
        run_test(m, a, row);
        out.row(row);
        rows.push_back(std::move(row));
      }
    }
  }
}

void check_args(BenchArgs& a) {
  if (a.threads.empty()) a.threads = {omp_get_max_threads()};
  for (int t : a.threads)
    if (t < 1) throw std::runtime_error(fmt::format("-t {}: a thread count is at least 1", t));
  for (const auto* v : {&a.n_prompt, &a.n_gen, &a.n_depth})
    for (int64_t x : *v)
      if (x < 0) throw std::runtime_error(fmt::format("-p/-n/-d {}: token counts are at least 0", x));
  for (const auto& d : a.dtypes) weights::parse_dtype_policy(d);  // the engine's own list of dtypes
  parse_bench_format(a.output);
  // Followers follow one loaded model until rank 0 exits: one model per job.
  if (a.tensor_parallel_size > 1 && a.dtypes.size() != 1)
    throw std::runtime_error("--tensor-parallel-size: bench one --dtype per MPI job");
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Prompt processing and generation speed in llama-bench's form, "
                                          "with the memory-bandwidth ceiling of decode");
  cmd->add_option("model_dir,-m,--model", a->model_dir, "Hugging Face model directory; default: SmolLM2-135M-Instruct");
  cmd->add_option("-p,--n-prompt", a->n_prompt, "prompt tokens of the pp tests (comma list; 0: none)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("-n,--n-gen", a->n_gen, "generated tokens of the tg tests (comma list; 0: none)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("-d,--n-depth", a->n_depth, "context depth: tokens already in the KV cache (comma list)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("-r,--repetitions", a->reps, "repetitions of each test")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("-t,--threads", a->threads, "threads (comma list; default: OMP_NUM_THREADS or the cores)")
      ->delimiter(',');
  cmd->add_option("--dtype", a->dtypes, "weight storage, as fuselm generate --dtype (comma list)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--ub,--ubatch-size", a->n_ubatch, "tokens per prefill forward")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--kv-cache-dtype", a->kv_cache_dtype,
                  "KV cache storage, K and V alike: auto (as generate and serve: f32 for an fp32 model, bf16 for bf16, f16 or "
                  "quantized weights; llama-bench's default is f16), f32, bf16 or q8_0")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "f32", "bf16", "q8_0"}));
  cmd->add_option("-o,--output", a->output, "output format: md, json, jsonl or csv")->capture_default_str();
  cmd->add_flag("--no-warmup", a->no_warmup, "skip the warm-up run before each test");
  cmd->add_flag("--no-bandwidth", a->no_bandwidth, "do not measure memory bandwidth (no ceiling)");
  cmd->add_option("--bandwidth-mib", a->bandwidth_mib, "buffer of the bandwidth probe in MiB (default: max(1024, 4 x LLC))")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_fuser_options(*cmd, a->fusers);
  cmd->add_option("--tensor-parallel-size", a->tensor_parallel_size,
                  "split the model over N ranks of an MPI job (mpirun -np N fuselm bench ...); the other ranks run "
                  "OMP_NUM_THREADS threads; docs/tensor-parallel.md")
      ->check(CLI::Range(1, 4096));
  add_speculative_options(*cmd, a->speculative);
  cmd->add_option("--prompt-file", a->prompt_file, "with --speculative-method: the prompt text whose decoding is timed");
  cmd->add_flag("--chat", a->chat, "with --speculative-method: render --prompt-file with the chat template as one user message");
  cmd->callback([a] {
    check_args(*a);
    if (a->speculative.enabled()) {
      if (a->prompt_file.empty()) throw std::runtime_error("--speculative-method: give the prompt to decode with --prompt-file");
      if (a->output != "md") throw std::runtime_error("--speculative-method: the comparison prints a markdown table only (-o md)");
      bench_speculative({a->model_dir, a->dtypes, a->threads, a->prompt_file, a->chat, a->n_gen.front(), a->reps, a->fusers,
                         a->kv_cache_dtype},
                        a->speculative);
      return;
    }
    BenchPrinter out(parse_bench_format(a->output), stdout);
    std::vector<BenchRow> rows;
    // The header comes after the first load: under TP only rank 0 returns from it (the others
    // follow its steps inside load_model), so only rank 0 reports.
    for (const auto& d : a->dtypes) bench_dtype(*a, d, &d == &a->dtypes.front(), out, rows);
    out.footer(rows);
  });
}

}  // namespace fuselm::cli
