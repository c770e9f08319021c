#include "cli/engine_args.h"

#include <cctype>
#include <limits>
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
                 "KV cache storage: auto (f32 for an fp32 model, bf16 for bf16, f16 or quantized weights), f32, or bf16 (half the memory per token)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  cmd.add_flag("--no-prefix-caching", a.no_prefix_caching, "do not reuse the KV of repeated prompt prefixes");
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
  m.kv_dtype_auto = e.kv_cache_dtype == "auto";
  if (!m.kv_dtype_auto) m.kv_dtype = kv::parse_kv_dtype(e.kv_cache_dtype);
}

}  // namespace fuselm::cli
