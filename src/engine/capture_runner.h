#pragma once
// Finding a model's IR and (re)capturing it when it is missing or stale. Capture is Python
// (python/fuselm_capture); the engine runs it as a child process.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace fuselm::engine {

/// Why an IR needs capturing, or "" when ir_dir/ir.json (default model_dir/fuselm-ir) is current:
/// same IR version, same capture version, and the config.json it was captured from (compared
/// parsed, so whitespace and key order do not count).
std::string ir_stale_reason(const std::filesystem::path& model_dir);
std::string ir_stale_reason(const std::filesystem::path& model_dir, const std::filesystem::path& ir_dir);

/// The IR directory of model_dir: model_dir/fuselm-ir, or when that is not current the cache's
/// (ir_cache.h) if that is. Otherwise captures (progress to stderr) into model_dir/fuselm-ir, or
/// into the cache when model_dir is not writable. Capture holds a lock in the IR directory: a
/// second process waits, then reuses the first one's IR. With allow_capture false a stale IR is an
/// error that says how to capture. Throws std::runtime_error when capture fails (its last error
/// line is included). trust_remote_code: capture may run Python files that the model directory
/// ships (config.json's auto_map, transformers' trust_remote_code); without it capture refuses such a
/// model. An IR that is current is used as is: no model Python runs. served_context > 0: the IR of
/// a model whose forward reads its sequence length, fixed for that served context (capture's
/// --context; its own directory, fuselm-ir-ctxN, beside the model's).
std::filesystem::path ensure_ir(const std::filesystem::path& model_dir, bool allow_capture,
                                bool trust_remote_code = false, int64_t served_context = 0);

/// The context an IR's forward read its sequence length at (ir_dir/sequence_length.json, which
/// capture writes when the model picks something, a length-dependent RoPE, by that length), or 0
/// when it read none. Throws std::runtime_error naming the file when it is malformed.
int64_t sequence_length_context(const std::filesystem::path& ir_dir);

/// Runs `python -m <module> <args...>` (capture_python(), the repository's python/ importable,
/// every argument quoted, no stdin). Its lines stream to stderr as they come (stdout's too unless
/// drop_stdout), except one starting with error_prefix, which is held back. Returns "" when it
/// succeeds, else why it did not: that line without the prefix, else its last line, else how
/// Python ended. Throws std::runtime_error only when Python cannot be started.
std::string run_python_module(const std::string& module, const std::vector<std::string>& args,
                              std::string_view error_prefix, bool drop_stdout);

/// The Python interpreter used for capture: $FUSELM_PYTHON, else the repository's .venv.
std::string capture_python();
/// The repository root this binary was built from ($FUSELM_HOME overrides).
std::filesystem::path source_dir();

}  // namespace fuselm::engine
