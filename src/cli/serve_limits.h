#pragma once
// The request limits of `fuselm serve` as options (server/request_limits.h).
#include <CLI/CLI.hpp>

#include "server/request_limits.h"

namespace fuselm::cli {

/// Adds --max-body-mb, --max-json-depth, --max-tokens-limit and --request-timeout to `cmd`,
/// writing into `limits` (whose values are the defaults shown).
void add_limit_options(CLI::App& cmd, server::RequestLimits& limits);

}  // namespace fuselm::cli
