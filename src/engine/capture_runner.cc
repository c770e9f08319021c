#include "engine/capture_runner.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

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

std::string ir_stale_reason(const fs::path& model_dir) {
  const fs::path ir = model_dir / "fuselm-ir" / "ir.json";
  if (!fs::exists(ir)) return "no IR yet";
  nlohmann::json j;
  try {
    std::ifstream in(ir);
    j = nlohmann::json::parse(in);
  } catch (const std::exception&) {
    return "the IR is unreadable";
  }
  if (j.value("version", 0) != ir::kIrVersion) return fmt::format("the IR has version {}", j.value("version", 0));
  if (j.value("capture_version", "") != ir::kCaptureVersion) return "the IR comes from another capture version";
  const auto& model = j.value("model", nlohmann::json::object());
  if (model.value("config_json", "") != read_text(model_dir / "config.json")) return "config.json changed";
  return "";
}

static std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

fs::path ensure_ir(const fs::path& model_dir, bool allow_capture) {
  if (!fs::exists(model_dir / "config.json"))
    throw std::runtime_error(fmt::format("{}: no config.json (is this a Hugging Face model directory?)", model_dir.string()));
  const fs::path ir_dir = model_dir / "fuselm-ir";
  std::string why = ir_stale_reason(model_dir);
  if (why.empty()) return ir_dir;
  if (!allow_capture)
    throw std::runtime_error(fmt::format("{}: {}; capture it with: PYTHONPATH={}/python {} -m fuselm_capture {}",
                                         (ir_dir / "ir.json").string(), why, source_dir().string(), capture_python(),
                                         model_dir.string()));
  std::fprintf(stderr, "fuselm: capturing %s (%s)\n", model_dir.c_str(), why.c_str());
  const fs::path log = fs::temp_directory_path() / fmt::format("fuselm-capture-{}.log", ::getpid());
  // stderr of capture streams its progress lines to the user and is kept for the error message.
  std::string cmd = fmt::format("PYTHONPATH={} {} -m fuselm_capture {} 2>&1 | tee {} >&2; exit ${{PIPESTATUS[0]}}",
                                shell_quote((source_dir() / "python").string()), shell_quote(capture_python()),
                                shell_quote(model_dir.string()), shell_quote(log.string()));
  int rc = std::system(("bash -c " + shell_quote(cmd)).c_str());
  std::string out = read_text(log);
  fs::remove(log);
  if (rc != 0) {
    std::string last;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) last = line;
    throw std::runtime_error(fmt::format("capture of {} failed: {}", model_dir.string(), last));
  }
  return ir_dir;
}

}  // namespace fuselm::engine
