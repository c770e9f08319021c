#include "cli/bench_speculative.h"

#include <omp.h>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "cli/chat_renderer.h"
#include "engine/generator.h"
#include "kernels/cpu/isa.h"

namespace fuselm::cli {
namespace {

std::vector<int64_t> prompt_ids(const SpecBenchArgs& a, const LoadedModel& loaded) {
  std::ifstream in(a.prompt_file, std::ios::binary);
  if (!in) throw std::runtime_error("--prompt-file " + a.prompt_file + ": cannot read");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (!loaded.tokenizer) throw std::runtime_error("--prompt-file needs a tokenizer.json in the model directory");
  if (a.chat) {
    auto render = make_chat_renderer(loaded.dir);
    if (!render) throw std::runtime_error("--chat needs a chat template; the model has none");
    const nlohmann::ordered_json messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}});
    text = render(nlohmann::ordered_json{{"messages", messages}}, true);
  }
  const auto ids = a.chat ? loaded.tokenizer->encode_rendered(text) : loaded.tokenizer->encode(text);
  return {ids.begin(), ids.end()};
}

double tokens_per_second(const engine::GenerateResult& r) {
  const size_t n = r.token_ids.size();
  return n > 1 && r.decode_seconds > 0 ? static_cast<double>(n - 1) / r.decode_seconds : 0.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

struct Pair {
  std::vector<double> plain, spec, ratio;
  int64_t drafts = 0, drafted = 0, accepted = 0, generated = 0;
  bool identical = true;
};

Pair run_pairs(engine::Model& m, const engine::GenerateRequest& plain, const engine::GenerateRequest& spec, int reps) {
  Pair p;
  engine::GenerateRequest warm = plain;
  warm.max_tokens = std::min<int64_t>(plain.max_tokens, 8);
  engine::generate(m, warm);
  for (int r = 0; r < reps; ++r) {
    const auto a = engine::generate(m, plain);
    const auto b = engine::generate(m, spec);
    p.plain.push_back(tokens_per_second(a));
    p.spec.push_back(tokens_per_second(b));
    p.ratio.push_back(p.plain.back() > 0 ? p.spec.back() / p.plain.back() : 0.0);
    p.identical = p.identical && a.token_ids == b.token_ids;
    p.drafts += b.spec_drafts;
    p.drafted += b.spec_draft_tokens;
    p.accepted += b.spec_accepted_tokens;
    p.generated = static_cast<int64_t>(b.token_ids.size());
  }
  return p;
}

}  // namespace

void bench_speculative(const SpecBenchArgs& a, const SpeculativeArgs& spec) {
  std::printf("speculative decoding, greedy, one stream; decode tokens/s after the first token (prefill excluded); CPU ISA %s\n\n",
              kernels::isa_name(kernels::cpu_isa()));
  std::printf("| dtype | threads | speculation | prompt | generated | plain tok/s | spec tok/s | ratio (median) | acceptance | mean accepted length | identical |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (const auto& dtype : a.dtypes) {
    ModelArgs ma;
    ma.model_dir = a.model_dir;
    ma.dtype = dtype;
    ma.fusers = a.fusers;
    set_kv_cache_dtype(ma, a.kv_cache_dtype);
    auto loaded = load_model(ma);
    engine::GenerateRequest plain;
    plain.prompt_ids = prompt_ids(a, loaded);
    plain.max_tokens = a.n_gen;
    plain.sampling.temperature = 0.f;
    const Speculation sp = setup_speculation(spec, *loaded.model, ma);
    engine::GenerateRequest with = plain;
    with.speculative = sp.options;
    for (int t : a.threads) {
      omp_set_num_threads(t);
      const Pair p = run_pairs(*loaded.model, plain, with, a.reps);
      const double acc = p.drafted > 0 ? static_cast<double>(p.accepted) / static_cast<double>(p.drafted) : 0.0;
      const double len = p.drafts > 0 ? static_cast<double>(p.accepted + p.drafts) / static_cast<double>(p.drafts) : 0.0;
      std::printf("| %s | %d | %s | %zu | %lld | %.1f | %.1f | %.2fx | %.3f | %.2f | %s |\n", dtype.c_str(), t, describe(spec).c_str(),
                  plain.prompt_ids.size(), static_cast<long long>(p.generated), median(p.plain), median(p.spec), median(p.ratio), acc,
                  len, p.identical ? "yes" : "NO");
      std::fflush(stdout);
    }
  }
}

}  // namespace fuselm::cli
