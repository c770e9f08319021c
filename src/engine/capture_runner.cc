#include "engine/capture_runner.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "engine/file_lock.h"
#include "engine/ir_cache.h"
#include "base/json_limited.h"
#include "ir/load.h"

#ifndef FUSELM_SOURCE_DIR
#define FUSELM_SOURCE_DIR "."
#endif

namespace fuselm::engine {
namespace fs = std::filesystem;

fs::path source_dir() {
  if (const char* h = std::getenv("FUSELM_HOME")) return h;
  return FUSELM_SOURCE_DIR;
}

std::string capture_python() {
  if (const char* p = std::getenv("FUSELM_PYTHON")) return p;
  return (source_dir() / ".venv" / "bin" / "python").string();
}

static std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ir_stale_reason(const fs::path& model_dir) { return ir_stale_reason(model_dir, model_dir / "fuselm-ir"); }

std::string ir_stale_reason(const fs::path& model_dir, const fs::path& ir_dir) {
  const fs::path ir = ir_dir / "ir.json";
  if (!fs::exists(ir)) return "no IR yet";
  nlohmann::json j;
  try {
    std::ifstream in(ir);
    if (!in) return "the IR cannot be opened";
    j = base::parse_json_limited(in);
  } catch (const std::exception& e) {
    std::string why = e.what();  // "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    if (auto at = why.find("] "); at != std::string::npos) why = why.substr(at + 2);
    for (char& c : why)
      if (c == '\n' || c == '\r') c = ' ';
    return "the IR is not valid JSON (" + why + ")";
  }
  if (!j.is_object()) return fmt::format("the IR is JSON {}, not an object", j.type_name());
  const auto version = j.find("version");
  if (version == j.end()) return fmt::format("the IR has no 'version' (this engine reads version {})", ir::kIrVersion);
  if (!version->is_number_integer() || version->get<int64_t>() != ir::kIrVersion)
    return fmt::format("the IR has version {} but this engine reads version {}", version->dump(), ir::kIrVersion);
  const auto cv = j.find("capture_version");
  if (cv == j.end() || !cv->is_string() || cv->get<std::string>() != ir::kCaptureVersion)
    return fmt::format("the IR comes from capture version {}, not {}", cv == j.end() ? "(none)" : cv->dump(),
                       ir::kCaptureVersion);
  const auto model = j.find("model");
  if (model == j.end() || !model->is_object()) return "the IR has no 'model' object";
  const auto config = model->find("config_json");
  if (config == model->end() || !config->is_string()) return "the IR records no config.json";
  // Compared parsed: a trailing newline, other whitespace or another key order is the same config.
  nlohmann::json recorded, current;
  try {
    recorded = base::parse_json_limited(config->get<std::string>());
    current = base::parse_json_limited(read_text(model_dir / "config.json"));
  } catch (const std::exception&) {
    return "config.json changed since capture";  // is no JSON now (capture will say what is wrong)
  }
  if (recorded != current) return "config.json changed since capture";
  return "";
}

static std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string run_python_module(const std::string& module, const std::vector<std::string>& args,
                              std::string_view error_prefix, bool drop_stdout) {
  const std::string python = capture_python();
  std::string cmd = fmt::format("PYTHONPATH={} {} -m {}", shell_quote((source_dir() / "python").string()),
                                shell_quote(python), module);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += drop_stdout ? " 2>&1 >/dev/null </dev/null" : " 2>&1 </dev/null";
  std::fflush(stderr);
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error(fmt::format("cannot start {}", python));
  std::string error, last, line;
  char buf[4096];
  auto take = [&](const std::string& l) {
    if (l.rfind(error_prefix, 0) == 0) {
      error = l.substr(error_prefix.size());
      return;
    }
    std::fprintf(stderr, "%s\n", l.c_str());
    if (l.find_first_not_of(" \t\r") != std::string::npos) last = l;
  };
  while (std::fgets(buf, sizeof buf, pipe)) {
    line += buf;
    if (line.back() != '\n') continue;  // a long line arrives in pieces
    line.pop_back();
    take(line);
    line.clear();
  }
  if (!line.empty()) take(line);
  const int status = ::pclose(pipe);
  if (status == 0 && error.empty()) return "";
  return !error.empty() ? error
         : !last.empty() ? last
         : WIFSIGNALED(status) ? fmt::format("Python was killed by signal {}", WTERMSIG(status))
                               : fmt::format("Python exited with status {}", WEXITSTATUS(status));
}

namespace {

/// Runs python -m fuselm_capture model_dir --out ir_dir [--context N]; throws with capture's own error line.
void run_capture(const fs::path& model_dir, const fs::path& ir_dir, const std::string& why, bool trust_remote_code,
                 int64_t served_context) {
  const std::string python = capture_python();
  if (!fs::exists(python))
    throw std::runtime_error(fmt::format("capture of {} needs Python at {} (set FUSELM_PYTHON, or run scripts/setup.sh)",
                                         model_dir.string(), python));
  std::fprintf(stderr, "fuselm: capturing %s (%s)\n", model_dir.c_str(), why.c_str());
  // Capture's progress lines (stdout and stderr) stream to our stderr as they come; its one
  // "fuselm capture: error: ..." line is held back and becomes our one error line.
  std::vector<std::string> args = {model_dir.string(), "--out", ir_dir.string()};
  if (trust_remote_code) args.push_back("--trust-remote-code");
  if (served_context > 0) {
    args.push_back("--context");
    args.push_back(std::to_string(served_context));
  }
  std::string failed;
  try {
    failed = run_python_module("fuselm_capture", args, "fuselm capture: error: ", false);
  } catch (const std::exception& e) {
    failed = e.what();
  }
  if (!failed.empty()) throw std::runtime_error(fmt::format("capture of {} failed: {}", model_dir.string(), failed));
  if (!fs::exists(ir_dir / "ir.json"))
    throw std::runtime_error(fmt::format("capture of {} wrote no {}", model_dir.string(), (ir_dir / "ir.json").string()));
}

/// cache_ir_dir(model_dir), or "" when it cannot be known (config.json is no JSON, no HOME):
/// capture then reports what is wrong with the model, not with the cache.
fs::path cache_dir_or_empty(const fs::path& model_dir) {
  try {
    return cache_ir_dir(model_dir);
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace

fs::path ensure_ir(const fs::path& model_dir, bool allow_capture, bool trust_remote_code, int64_t served_context) {
  if (!fs::exists(model_dir / "config.json"))
    throw std::runtime_error(fmt::format("{}: no config.json (is this a Hugging Face model directory?)", model_dir.string()));
  // An IR fixed for a served context lives beside the model's own, named by that context.
  const std::string suffix = served_context > 0 ? fmt::format("-ctx{}", served_context) : "";
  const fs::path local = model_dir / ("fuselm-ir" + suffix);
  const std::string why = ir_stale_reason(model_dir, local);
  if (why.empty()) return local;
  // A model directory that could not hold its IR had it captured to the cache.
  fs::path cached = cache_dir_or_empty(model_dir);
  if (!cached.empty()) cached += suffix;
  if (!cached.empty() && ir_stale_reason(model_dir, cached).empty()) return cached;
  if (!allow_capture)
    throw std::runtime_error(fmt::format("{}: {}; re-capture by running without --no-capture, or with: "
                                         "PYTHONPATH={}/python {} -m fuselm_capture {}",
                                         (local / "ir.json").string(), why, source_dir().string(), capture_python(),
                                         model_dir.string()));
  const bool writable = dir_is_writable(fs::is_directory(local) ? local : model_dir);
  const fs::path ir_dir = writable ? local : cached.empty() ? fs::path(cache_ir_dir(model_dir).string() + suffix) : cached;
  if (!writable) std::fprintf(stderr, "fuselm: %s is not writable; the IR goes to %s\n", model_dir.c_str(), ir_dir.c_str());
  std::error_code ec;
  fs::create_directories(ir_dir, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot create the IR directory: {}", ir_dir.string(), ec.message()));
  // One capture at a time per IR directory; whoever waited finds the IR current and reuses it.
  FileLock lock(ir_dir / ".capture.lock", "another capture of this model");
  const std::string why_now = ir_stale_reason(model_dir, ir_dir);
  if (why_now.empty()) return ir_dir;
  run_capture(model_dir, ir_dir, why_now, trust_remote_code, served_context);
  return ir_dir;
}

int64_t sequence_length_context(const fs::path& ir_dir) {
  std::ifstream in(ir_dir / "sequence_length.json");
  if (!in) return 0;
  try {
    const auto j = nlohmann::json::parse(in);
    return j.value("context", int64_t{0});
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{}: {} (re-capture: remove the directory)",
                                         (ir_dir / "sequence_length.json").string(), e.what()));
  }
}

}  // namespace fuselm::engine
