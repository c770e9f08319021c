#pragma once
// Finding a model's IR and (re)capturing it when it is missing or stale. Capture is Python
// (python/fuselm_capture); the engine runs it as a child process.
#include <filesystem>
#include <string>

namespace fuselm::engine {

/// Why an IR needs capturing, or "" when model_dir/fuselm-ir/ir.json is current: same IR
/// version, same capture version, and the config.json it was captured from.
std::string ir_stale_reason(const std::filesystem::path& model_dir);

/// The IR directory of model_dir, capturing first when ir_stale_reason() says so (progress goes
/// to stderr). With allow_capture false a stale IR is an error that says how to capture.
/// Throws std::runtime_error when capture fails (its last error line is included).
std::filesystem::path ensure_ir(const std::filesystem::path& model_dir, bool allow_capture);

/// The Python interpreter used for capture: $FUSELM_PYTHON, else the repository's .venv.
std::string capture_python();
/// The repository root this binary was built from ($FUSELM_HOME overrides).
std::filesystem::path source_dir();

}  // namespace fuselm::engine
