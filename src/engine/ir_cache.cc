#include "engine/ir_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "base/json_limited.h"

namespace fuselm::engine {
namespace fs = std::filesystem;

std::string canonical_config(const fs::path& config_json) {
  std::ifstream in(config_json, std::ios::binary);
  if (!in) throw std::runtime_error(config_json.string() + ": cannot be read");
  nlohmann::json j;
  try {
    j = base::parse_json_limited(in);
  } catch (const std::exception&) {  // nlohmann's parse_error, or base::JsonTooDeep
    throw std::runtime_error(config_json.string() + ": not valid JSON");
  }
  return j.dump();  // nlohmann keeps object keys sorted: the dump is canonical
}

namespace {

/// FNV-1a, 64 bits: stable across builds and machines, unlike std::hash.
void fnv1a(uint64_t& h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  h ^= 0xff;  // a field separator, so ("ab", "c") and ("a", "bc") differ
  h *= 1099511628211ull;
}

}  // namespace

std::string model_content_key(const fs::path& model_dir) {
  uint64_t h = 14695981039346656037ull;
  fnv1a(h, canonical_config(model_dir / "config.json"));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(model_dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && (name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json")))
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    fnv1a(h, f.filename().string());
    fnv1a(h, std::to_string(fs::file_size(f)));
    fnv1a(h, std::to_string(fs::last_write_time(f).time_since_epoch().count()));
  }
  return fmt::format("{:016x}", h);
}

fs::path cache_root() {
  if (const char* c = std::getenv("FUSELM_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "fuselm";
  const char* home = std::getenv("HOME");
  if (!home || !*home) throw std::runtime_error("no cache directory for the IR: set FUSELM_CACHE (HOME is not set)");
  return fs::path(home) / ".cache" / "fuselm";
}

fs::path cache_ir_dir(const fs::path& model_dir) {
  const std::string name = fs::weakly_canonical(fs::absolute(model_dir)).filename().string();
  return cache_root() / fmt::format("{}-{}", name.empty() ? "model" : name, model_content_key(model_dir));
}

bool dir_is_writable(const fs::path& dir) {
  const fs::path probe = dir / fmt::format(".fuselm-write-probe-{}", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  ::close(fd);
  ::unlink(probe.c_str());
  return true;
}

}  // namespace fuselm::engine
