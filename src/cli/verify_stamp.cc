#include "cli/verify_stamp.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>
#include <vector>

#include "engine/ir_cache.h"

namespace fuselm::cli {
namespace fs = std::filesystem;

namespace {

void fnv1a(uint64_t& h, std::string_view s) {  // FNV-1a 64, with a field separator
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  h = (h ^ 0xff) * 1099511628211ull;
}

bool is_weight_file(const std::string& name) {
  return name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json") || name.ends_with(".gguf");
}

nlohmann::json read_record(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  return nlohmann::json::object();  // a damaged record is as good as none: verify writes a new one
}

// Writes through a temporary file and a rename, so a reader never sees half a record.
void write_record(const fs::path& path, const nlohmann::json& j) {
  fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + fmt::format(".tmp-{}", ::getpid());
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error(tmp.string() + ": cannot write");
    out << j.dump(1) << "\n";
  }
  fs::rename(tmp, path);
}

}  // namespace

std::string verify_model_key(const fs::path& model_dir) {
  uint64_t h = 14695981039346656037ull;
  fnv1a(h, engine::canonical_config(model_dir / "config.json"));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(model_dir))
    if (is_weight_file(e.path().filename().string()) && fs::is_regular_file(e.path())) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {  // file_size and last_write_time follow symbolic links
    fnv1a(h, f.filename().string());
    fnv1a(h, std::to_string(fs::file_size(f)));
    fnv1a(h, std::to_string(fs::last_write_time(f).time_since_epoch().count()));
  }
  return fmt::format("{:016x}", h);
}

fs::path verify_record_path(const fs::path& model_dir) {
  const fs::path abs = fs::absolute(model_dir).lexically_normal();
  const std::string name = abs.filename().empty() ? abs.parent_path().filename().string() : abs.filename().string();
  return engine::cache_root() / "verified" / fmt::format("{}-{}.json", name, verify_model_key(model_dir));
}

std::string engine_build_id() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "unknown";
  const auto size = fs::file_size(exe, ec);
  const auto mtime = fs::last_write_time(exe, ec);
  if (ec) return "unknown";
  return fmt::format("{}:{}:{}", exe.string(), size, mtime.time_since_epoch().count());
}

void record_verify_pass(const fs::path& model_dir, nlohmann::json pass) {
  try {
    const fs::path path = verify_record_path(model_dir);
    nlohmann::json rec = read_record(path);
    pass["engine_build"] = engine_build_id();
    pass["unix_time"] = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    rec["model_dir"] = fs::absolute(model_dir).string();
    rec["passes"].push_back(std::move(pass));
    write_record(path, rec);
    std::fprintf(stderr, "fuselm verify: recorded the pass in %s\n", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuselm verify: note: the pass was not recorded (%s)\n", e.what());
  }
}

void hint_verify_once(const fs::path& model_dir, const std::string& model_arg) {
  try {
    const fs::path path = verify_record_path(model_dir);
    nlohmann::json rec = read_record(path);
    if (rec.contains("passes") || rec.value("hinted", false)) return;
    std::fprintf(stderr, "fuselm: hint: this model was never checked against transformers here; "
                         "`fuselm verify%s%s` compares its logits (docs/verify.md; shown once)\n",
                 model_arg.empty() ? "" : " ", model_arg.c_str());
    rec["model_dir"] = fs::absolute(model_dir).string();
    rec["hinted"] = true;
    write_record(path, rec);
  } catch (const std::exception&) {
    // a hint is never worth a failure: no cache, no config.json to key on, a read-only disk
  }
}

}  // namespace fuselm::cli
