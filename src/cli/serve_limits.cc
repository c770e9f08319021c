#include "cli/serve_limits.h"

#include <cmath>
#include <memory>

namespace fuselm::cli {

void add_limit_options(CLI::App& cmd, server::RequestLimits& limits) {
  // Megabytes as a double for the option; written back into bytes once parsed.
  auto mb = std::make_shared<double>(static_cast<double>(limits.max_body_bytes) / (1 << 20));
  cmd.add_option_function<double>(
         "--max-body-mb", [&limits](double v) { limits.max_body_bytes = static_cast<size_t>(std::llround(v * (1 << 20))); },
         "largest request body in MiB (larger: 413; 0: no limit)")
      ->default_str(std::to_string(static_cast<int>(*mb)))
      ->check(CLI::Range(0.0, 1e6));
  cmd.add_option("--max-json-depth", limits.max_json_depth, "deepest JSON nesting in a request body (deeper: 400)")
      ->capture_default_str()->check(CLI::Range(2, 100000));
  cmd.add_option("--max-tokens-limit", limits.max_tokens, "most new tokens one request may ask for (more: 400; 0: the context)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd.add_option("--request-timeout", limits.timeout_s,
                 "seconds a generation request may take, queueing included (then cancelled, 504; 0: no limit)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
}

}  // namespace fuselm::cli
