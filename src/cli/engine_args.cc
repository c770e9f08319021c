#include "cli/engine_args.h"

#include <fmt/core.h>

#include <cctype>
#include <limits>
#include <random>
#include <stdexcept>

namespace fuselm::cli {

void add_engine_options(CLI::App& cmd, EngineArgs& a) {
  cmd.add_option("--max-num-seqs", a.max_num_seqs, "sequences in the running batch at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd.add_option("--max-num-batched-tokens", a.max_num_batched_tokens, "tokens in one forward step at most (prefill is chunked to fit)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd.add_option("--max-waiting", a.max_waiting, "queued requests at most; beyond, the server answers 503")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd.add_option("--kv-cache-memory", a.kv_cache_memory,
                 "KV pool size in bytes (suffixes K, M, G, KiB, MiB, GiB); default: max-num-seqs contexts, at most a fifth of free memory and 4 GiB (at least one context when it fits)");
  cmd.add_option("--kv-cache-dtype", a.kv_cache_dtype,
                 "KV cache storage: auto (f32 for an fp32 model, bf16 for bf16, f16 or quantized weights), f32, bf16 (half the memory per token), or q8_0 (34 bytes per 32 values; latent rows pad the latent and rope key each to 32-blocks)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "f32", "bf16", "q8_0"}));
  cmd.add_flag("--no-prefix-caching", a.no_prefix_caching, "do not reuse the KV of repeated prompt prefixes");
}

CLI::Validator in_range(const engine::ParamRange& r) {
  return CLI::Validator(
      [r](std::string& in) -> std::string {
        double v = 0;
        const bool ok = CLI::detail::lexical_cast(in, v) && r.contains(v);
        return ok ? std::string() : fmt::format("value {} is not in {}", in, r.interval());
      },
      "in " + r.interval());
}

uint64_t SamplingArgs::seed_or_random() const {
  return seed_option && seed_option->count() > 0 ? engine::seed_from_int(seed) : std::random_device{}();
}

engine::SamplingParams SamplingArgs::params(uint64_t s) const {
  engine::SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = s;
  return p;
}

void add_sampling_options(CLI::App& cmd, SamplingArgs& a, bool top_k) {
  namespace R = engine::sampling_range;
  cmd.add_option("--temperature", a.temperature,
                 fmt::format("sampling temperature in {} (the server's OpenAI bounds); 0 = greedy", R::temperature.interval()))
      ->capture_default_str()
      ->check(in_range(R::temperature));
  if (top_k)
    cmd.add_option("--top-k", a.top_k, "sample from the k most likely tokens; 0 = all")
        ->capture_default_str()
        ->check(in_range(R::top_k));
  cmd.add_option("--top-p", a.top_p, fmt::format("nucleus sampling mass in {}", R::top_p.interval()))
      ->capture_default_str()
      ->check(in_range(R::top_p));
  a.seed_option = cmd.add_option("--seed", a.seed, "random seed for sampling, any 64-bit integer (default: a random one)");
}

int64_t parse_bytes(const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw std::runtime_error("--kv-cache-memory: '" + s + "' is not a size (e.g. 4G, 512MiB, 1000000)");
  }
  std::string unit = s.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mul = 1;
  if (unit == "" || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KB") mul = 1e3;
  else if (unit == "M" || unit == "MB") mul = 1e6;
  else if (unit == "G" || unit == "GB") mul = 1e9;
  else if (unit == "KIB") mul = 1024.0;
  else if (unit == "MIB") mul = 1024.0 * 1024;
  else if (unit == "GIB") mul = 1024.0 * 1024 * 1024;
  else throw std::runtime_error("--kv-cache-memory: unknown unit '" + s.substr(used) + "' (use K, M, G, KiB, MiB or GiB)");
  const double bytes = v * mul;
  if (!(bytes >= 1) || bytes > static_cast<double>(std::numeric_limits<int64_t>::max() / 2))
    throw std::runtime_error("--kv-cache-memory: '" + s + "' is not a positive size");
  return static_cast<int64_t>(bytes);
}

void apply_pool_sizing(const EngineArgs& e, ModelArgs& m) {
  if (!e.kv_cache_memory.empty()) m.kv_cache_bytes = parse_bytes(e.kv_cache_memory);
  m.kv_max_seqs = e.max_num_seqs;
  set_kv_cache_dtype(m, e.kv_cache_dtype);
}

}  // namespace fuselm::cli
