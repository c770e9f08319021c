// bench_mla: decode speed and KV-cache memory of a multi-head latent attention model with the
// latent cache (the mla fuser) and with the full-attention fallback (--disable-fuser mla), at
// several context lengths (docs/mla.md).
//
// For each path and context C: load the model, prefill C tokens once (timed), then decode N steps
// at positions C.. R times (each run rewrites the same slots); the median decode tok/s is reported
// with the KV-cache bytes per token and for the whole context (f32 rows, kv/paged_kv_cache.h).
//
// Usage: bench_mla MODEL_DIR [--contexts 1024,4096] [--tokens N] [--repeats R]
//   MODEL_DIR: a DeepSeek-V3-style model, e.g. `python tests/python/mla_models.py v3_bench DIR`.
//   OMP_NUM_THREADS sets the threads. Numbers on a shared machine are indicative only.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "engine/capture_runner.h"
#include "engine/model.h"

namespace {

namespace fs = std::filesystem;
using namespace fuselm;

struct Options {
  fs::path model_dir;
  std::vector<int64_t> contexts{1024, 4096};
  int64_t tokens = 32;
  int repeats = 3;
};

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
    else if (a == "--contexts") {
      o.contexts.clear();
      std::stringstream ss(value(i));
      for (std::string x; std::getline(ss, x, ',');) o.contexts.push_back(std::stoll(x));
    } else if (a == "-h" || a == "--help") {
      std::puts("usage: bench_mla MODEL_DIR [--contexts 1024,4096] [--tokens N] [--repeats R]");
      std::exit(0);
    } else if (!a.empty() && a[0] == '-') {
      throw std::runtime_error("unknown option " + a);
    } else {
      o.model_dir = a;
    }
  }
  if (o.model_dir.empty()) throw std::runtime_error("MODEL_DIR is required (python tests/python/mla_models.py v3_bench DIR)");
  if (o.tokens < 2 || o.repeats < 1 || o.contexts.empty()) throw std::runtime_error("--tokens >= 2, --repeats >= 1");
  for (auto c : o.contexts)
    if (c < 1) throw std::runtime_error("--contexts: lengths must be positive");
  return o;
}

struct Row {
  std::string path;
  int64_t context = 0, kv_bytes_per_token = 0;
  double decode_tps = 0, prefill_seconds = 0;
  std::vector<double> runs;
};

// One prefill of `context` tokens, then `repeats` timed runs of `tokens` decode steps at positions
// context .. context+tokens-1 (each run rewrites the same KV slots: the cost of a decode step at
// that context, without a prefill per run).
Row bench(const Options& o, const fs::path& ir_dir, bool latent, int64_t context) {
  using clock = std::chrono::steady_clock;
  engine::ModelOptions mo;
  mo.kv_tokens = context + o.tokens + 16;
  if (!latent) mo.fusers.disabled = {"mla"};
  auto model = engine::Model::load(o.model_dir, ir_dir, mo);
  if (model->max_context() < context + o.tokens)
    throw std::runtime_error(fmt::format("context {} + {} tokens exceeds the model's {}", context, o.tokens,
                                         model->max_context()));
  kv::SequenceKv seq;
  if (!seq.reserve(context + o.tokens, model->kv_cache())) throw std::runtime_error("KV cache too small");
  std::vector<int64_t> ids(static_cast<size_t>(context)), pos(static_cast<size_t>(context));
  for (int64_t i = 0; i < context; ++i) {
    ids[i] = (i * 7919 + 13) % model->vocab_size();
    pos[i] = i;
  }
  Row row;
  row.path = latent ? "latent" : "fallback";
  row.context = context;
  row.kv_bytes_per_token = model->kv_cache().bytes_per_token();
  runtime::SequenceSlice slice{0, context, context, seq.slots()};
  auto t0 = clock::now();
  model->forward(ids, pos, {&slice, 1});
  row.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  auto decode = [&](int64_t steps) {
    for (int64_t i = 0; i < steps; ++i) {
      const int64_t tok = (i * 31 + 7) % model->vocab_size(), p = context + i;
      slice = {0, 1, p + 1, seq.slots()};
      model->forward({&tok, 1}, {&p, 1}, {&slice, 1});
    }
  };
  decode(2);  // warm-up: the pool sizes itself for one-token steps
  for (int r = 0; r < o.repeats; ++r) {
    auto t1 = clock::now();
    decode(o.tokens);
    row.runs.push_back(static_cast<double>(o.tokens) / std::chrono::duration<double>(clock::now() - t1).count());
  }
  row.decode_tps = median(row.runs);
  seq.release(model->kv_cache());
  return row;
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!fs::exists(o.model_dir / "config.json"))
    throw std::runtime_error(fmt::format("{}: no config.json", o.model_dir.string()));
  const fs::path ir_dir = engine::ensure_ir(o.model_dir, true);
  std::printf("bench_mla: %s\nthreads %d; decode %lld tokens after a prompt of each context length; %d runs (median)\n\n",
              o.model_dir.c_str(), omp_get_max_threads(), static_cast<long long>(o.tokens), o.repeats);
  std::fflush(stdout);
  std::vector<Row> rows;
  for (int64_t c : o.contexts)
    for (bool latent : {true, false}) {
      rows.push_back(bench(o, ir_dir, latent, c));
      std::fflush(stdout);
    }
  std::printf("%-9s %8s %14s %16s %16s %11s   %s\n", "path", "context", "decode tok/s", "KV bytes/token",
              "KV MB (context)", "prefill s", "runs (tok/s)");
  for (const auto& r : rows) {
    std::string runs;
    for (double x : r.runs) runs += fmt::format("{}{:.1f}", runs.empty() ? "" : " ", x);
    std::printf("%-9s %8lld %14.2f %16lld %16.2f %11.2f   [%s]\n", r.path.c_str(), static_cast<long long>(r.context),
                r.decode_tps, static_cast<long long>(r.kv_bytes_per_token),
                static_cast<double>(r.kv_bytes_per_token * r.context) / 1e6, r.prefill_seconds, runs.c_str());
  }
  if (rows.size() >= 2 && rows[0].kv_bytes_per_token > 0)
    std::printf("\nKV memory: fallback / latent = %.1fx\n",
                static_cast<double>(rows[1].kv_bytes_per_token) / static_cast<double>(rows[0].kv_bytes_per_token));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mla: error: %s\n", e.what());
    return 1;
  }
}
