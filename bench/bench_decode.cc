// bench_decode: end-to-end decode and prefill speed of a real model against the memory-bandwidth
// ceiling of decode.
//
// Decode of one sequence reads every weight once per token, so its speed is bounded by
//   ceiling (tok/s) = memory bandwidth (bytes/s) / weight bytes per token.
// For each weight dtype (f32, then bf16) this loads the model, warms up, decodes N tokens greedily
// (EOS ignored) from a short prompt R times, and prefills a P-token prompt R times; medians are
// reported. The bandwidth is a multi-threaded streaming read of a 1 GiB buffer (best of 3).
// Each dtype runs with the fusers on and with them off (--no-fuse), both models loaded and their
// runs interleaved, and the closing lines give the fused / unfused ratio of decode and prefill speed.
//
// Usage: bench_decode [MODEL_DIR] [--tokens N] [--repeats R] [--prefill P] [--dtype f32|bf16|both]
//                     [--fusers on|off|both]
//   MODEL_DIR defaults to <repo>/models/SmolLM2-135M-Instruct (scripts/prepare_default_model.sh).
//   OMP_NUM_THREADS sets the threads; FUSELM_CPU_ISA=generic|avx2|avx512|avx512vnni|avx512bf16|amx the kernel path.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "engine/capture_runner.h"
#include "engine/generator.h"
#include "engine/model.h"
#include "kernels/cpu/isa.h"
#include "bench/probe.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using namespace fuselm;

constexpr const char* kShortPrompt = "The capital of France is";
constexpr const char* kParagraph =
    "The history of the printing press begins in the middle of the fifteenth century, when Johannes "
    "Gutenberg, a goldsmith from Mainz, combined movable metal type, oil-based ink and a wooden screw "
    "press adapted from those used to make wine. Before his invention, books were copied by hand, a "
    "slow and expensive process that kept written knowledge in the hands of monasteries, universities "
    "and wealthy patrons. ";

struct Options {
  fs::path model_dir;
  int64_t tokens = 64;
  int repeats = 3;
  int64_t prefill = 256;
  std::vector<std::string> dtypes{"f32", "bf16"};
  std::vector<bool> fused{true, false};
};

struct Row {
  std::string dtype;
  bool fused = true;
  int64_t weight_bytes = 0;
  double decode_tps = 0, prefill_tps = 0;
  std::vector<double> decode_runs, prefill_runs;
  // Tokens per second of process CPU time: with one thread, the speed the code would have on an
  // idle core, much less disturbed by other processes than wall time (which they can stretch).
  std::vector<double> decode_cpu_runs, prefill_cpu_runs;
};

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Options parse(int argc, char** argv) {
  Options o;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) throw std::runtime_error(fmt::format("{} needs a value", argv[i]));
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokens") o.tokens = std::stoll(value(i));
    else if (a == "--repeats") o.repeats = std::stoi(value(i));
    else if (a == "--prefill") o.prefill = std::stoll(value(i));
    else if (a == "--dtype") {
      const std::string d = value(i);
      if (d == "both") o.dtypes = {"f32", "bf16"};
      else if (d == "f32" || d == "bf16") o.dtypes = {d};
      else throw std::runtime_error("--dtype is f32, bf16 or both");
    } else if (a == "--fusers") {
      const std::string f = value(i);
      if (f == "both") o.fused = {true, false};
      else if (f == "on" || f == "off") o.fused = {f == "on"};
      else throw std::runtime_error("--fusers is on, off or both");
    } else if (a == "-h" || a == "--help") {
      std::puts("usage: bench_decode [MODEL_DIR] [--tokens N] [--repeats R] [--prefill P] [--dtype f32|bf16|both] "
                "[--fusers on|off|both]");
      std::exit(0);
    } else if (!a.empty() && a[0] == '-') {
      throw std::runtime_error("unknown option " + a);
    } else {
      o.model_dir = a;
    }
  }
  if (o.tokens < 2 || o.repeats < 1 || o.prefill < 1) throw std::runtime_error("--tokens >= 2, --repeats >= 1, --prefill >= 1");
  if (o.model_dir.empty()) o.model_dir = engine::source_dir() / "models" / "SmolLM2-135M-Instruct";
  return o;
}

// Token ids of the short prompt and of a prompt of exactly n tokens of real text, from the model's
// tokenizer.json; without one, a fixed short prompt and an empty long one.
void make_prompts(const fs::path& dir, int64_t n, std::vector<int64_t>& short_ids, std::vector<int64_t>& long_ids) {
  short_ids.clear();
  long_ids.clear();
  if (fs::exists(dir / "tokenizer.json")) {
    auto tok = tokenizer::Tokenizer::from_file((dir / "tokenizer.json").string());
    for (auto id : tok.encode(kShortPrompt, true)) short_ids.push_back(id);
    std::string text;
    std::vector<uint32_t> ids;
    while (static_cast<int64_t>(ids.size()) < n) {
      text += kParagraph;
      ids = tok.encode(text, true);
    }
    long_ids.assign(ids.begin(), ids.begin() + n);
  }
  if (short_ids.empty()) short_ids = {1, 2, 3, 4, 5};
}

// One row per fusers setting of one dtype. The settings' models are loaded side by side and their
// runs interleaved (on, off, on, off, ...), so a change of machine load hits both alike.
std::vector<Row> bench_dtype(const Options& o, const fs::path& ir_dir, const std::string& dtype) {
  std::vector<int64_t> short_ids, long_ids;
  make_prompts(o.model_dir, o.prefill, short_ids, long_ids);
  std::vector<std::unique_ptr<engine::Model>> models;
  std::vector<Row> rows;
  for (bool fused : o.fused) {
    engine::ModelOptions mo;
    mo.dtype = weights::parse_dtype_policy(dtype);
    mo.fusers.enabled = fused;  // what --no-fuse sets
    // The KV cache only needs the longest sequence of the bench (the default is the full context).
    mo.kv_tokens = std::max<int64_t>(o.prefill + 1, static_cast<int64_t>(short_ids.size()) + o.tokens) + 16;
    models.push_back(engine::Model::load(o.model_dir, ir_dir, mo));
    Row row;
    row.dtype = dtype;
    row.fused = fused;
    row.weight_bytes = models.back()->weight_bytes();
    rows.push_back(row);
  }
  if (long_ids.empty())  // no tokenizer: ids spread over the vocabulary
    for (int64_t i = 0; i < o.prefill; ++i)
      long_ids.push_back((i * 7919 + 13) % std::max<int64_t>(models[0]->vocab_size(), 1));

  engine::GenerateRequest dec;
  dec.prompt_ids = short_ids;
  dec.max_tokens = o.tokens;
  dec.stop_at_eos = false;  // --ignore-eos: always N tokens
  engine::GenerateRequest pre;
  pre.prompt_ids = long_ids;
  pre.max_tokens = 1;
  pre.stop_at_eos = false;

  // Warm-up: pages the weights in, sizes the buffer pool for both shapes, spins up the threads.
  for (auto& m : models) {
    engine::generate(*m, dec);
    engine::generate(*m, pre);
  }
  for (int r = 0; r < o.repeats; ++r)
    for (size_t k = 0; k < models.size(); ++k) {
      const double cpu0 = cpu_seconds();
      auto res = engine::generate(*models[k], dec);
      const double cpu = cpu_seconds() - cpu0;
      const auto n = static_cast<int64_t>(res.token_ids.size());
      if (n != o.tokens) throw std::runtime_error(fmt::format("decode made {} tokens, not {}", n, o.tokens));
      // decode_seconds covers the N - 1 forwards after prefill (and N samplings).
      rows[k].decode_runs.push_back(static_cast<double>(n - 1) / res.decode_seconds);
      // CPU time of the whole call, less the prefill's share by wall time.
      rows[k].decode_cpu_runs.push_back(static_cast<double>(n - 1) /
                                        (cpu * res.decode_seconds / (res.decode_seconds + res.prefill_seconds)));
      if (res.pool_allocations_after_first_decode != 0)
        std::fprintf(stderr, "bench_decode: %s: %lld pool allocations after the first decode step\n", dtype.c_str(),
                     static_cast<long long>(res.pool_allocations_after_first_decode));
    }
  for (int r = 0; r < o.repeats; ++r)
    for (size_t k = 0; k < models.size(); ++k) {
      const double cpu0 = cpu_seconds();
      auto res = engine::generate(*models[k], pre);
      const double cpu = cpu_seconds() - cpu0;
      rows[k].prefill_runs.push_back(static_cast<double>(long_ids.size()) / res.prefill_seconds);
      rows[k].prefill_cpu_runs.push_back(static_cast<double>(long_ids.size()) / cpu);
    }
  for (auto& row : rows) {
    row.decode_tps = median(row.decode_runs);
    row.prefill_tps = median(row.prefill_runs);
  }
  return rows;
}

std::string runs_text(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += fmt::format("{}{:.2f}", s.empty() ? "" : " ", x);
  return s;
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!fs::exists(o.model_dir / "config.json"))
    throw std::runtime_error(fmt::format("{}: no config.json (prepare the default model with "
                                         "scripts/prepare_default_model.sh, or pass a model directory)",
                                         o.model_dir.string()));
  const fs::path ir_dir = engine::ensure_ir(o.model_dir, true);
  std::printf("bench_decode: %s\n", o.model_dir.c_str());
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  std::printf("threads %d, OMP_WAIT_POLICY %s, kernels %s; decode %lld tokens from a short prompt, prefill %lld tokens; "
              "%d runs each (median)\n",
              omp_get_max_threads(), wait_policy ? wait_policy : "(unset)", kernels::isa_name(kernels::cpu_isa()),
              static_cast<long long>(o.tokens), static_cast<long long>(o.prefill), o.repeats);
  std::fflush(stdout);

  const double bw = bench::measure_memory_bandwidth_gbs(size_t{1} << 30, 3);
  std::printf("memory bandwidth: %.1f GB/s (1 GiB streaming read, all threads, best of 3)\n\n", bw);
  std::fflush(stdout);

  std::vector<Row> rows;
  for (const auto& d : o.dtypes)
    for (auto& r : bench_dtype(o, ir_dir, d)) rows.push_back(std::move(r));

  std::printf("%-5s %-7s %12s %12s %10s %14s %10s %14s\n", "dtype", "fusers", "weights MB", "decode tok/s", "bw GB/s",
              "ceiling tok/s", "% ceiling", "prefill tok/s");
  for (const auto& r : rows) {
    const double ceiling = bw * 1e9 / static_cast<double>(r.weight_bytes);
    std::printf("%-5s %-7s %12.1f %12.2f %10.1f %14.2f %9.1f%% %14.1f\n", r.dtype.c_str(), r.fused ? "on" : "off",
                r.weight_bytes / 1e6, r.decode_tps, bw, ceiling, 100.0 * r.decode_tps / ceiling, r.prefill_tps);
  }
  std::printf("\nruns (tok/s):\n");
  for (const auto& r : rows)
    std::printf("  %-5s %-3s decode [%s]  prefill [%s]\n        per CPU second: decode [%s]  prefill [%s]\n",
                r.dtype.c_str(), r.fused ? "on" : "off", runs_text(r.decode_runs).c_str(),
                runs_text(r.prefill_runs).c_str(), runs_text(r.decode_cpu_runs).c_str(),
                runs_text(r.prefill_cpu_runs).c_str());
  bool header = false;
  for (const auto& on : rows)
    for (const auto& off : rows)
      if (on.fused && !off.fused && on.dtype == off.dtype) {
        if (!header) std::printf("\nfused / unfused:\n");
        header = true;
        std::printf("  %-5s decode %.3fx  prefill %.3fx   (per CPU second: decode %.3fx  prefill %.3fx)\n",
                    on.dtype.c_str(), on.decode_tps / off.decode_tps, on.prefill_tps / off.prefill_tps,
                    median(on.decode_cpu_runs) / median(off.decode_cpu_runs),
                    median(on.prefill_cpu_runs) / median(off.prefill_cpu_runs));
      }
  std::printf("goal: decode >= 40%% of the ceiling\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode: error: %s\n", e.what());
    return 1;
  }
}
