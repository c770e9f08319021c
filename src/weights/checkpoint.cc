#include "base/json_limited.h"
#include "weights/checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <system_error>

#include <fmt/format.h>

#include "weights/error.h"

namespace fuselm::weights {

namespace fs = std::filesystem;

namespace {

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    return base::parse_json_limited(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, fmt::format("not valid JSON: {}", one_line(e.what())));
  } catch (const base::JsonTooDeep& e) {
    fail(path, e.what());
  }
}

/// A shard name from the index must stay inside the model directory.
bool safe_relative(const fs::path& p) {
  if (p.empty() || p.is_absolute() || p.has_root_name()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& path, const OpenOptions& options) {
  Checkpoint c;
  c.path_ = path;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) fail(path, "no such file or directory (expected a model directory or a .safetensors file)");

  auto add_file = [&](const fs::path& p) -> const SafetensorsFile* {
    c.files_.push_back(std::make_shared<const SafetensorsFile>(SafetensorsFile::open(p, options)));
    return c.files_.back().get();
  };

  if (fs::is_regular_file(status)) {
    const SafetensorsFile* f = add_file(path);
    for (const auto& [name, t] : f->tensors()) c.tensors_.emplace(name, Entry{f, &t});
    return c;
  }
  if (!fs::is_directory(status)) fail(path, "neither a directory nor a regular file");

  const fs::path index_path = path / kIndexName;
  if (fs::exists(index_path)) {
    const nlohmann::json index = read_json(index_path);
    if (!index.is_object()) fail(index_path, "not a JSON object");
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) fail(index_path, "has no \"weight_map\" object");
    if (wm->empty()) fail(index_path, "\"weight_map\" is empty");
    // shard name -> the keys it should hold
    std::map<std::string, std::vector<std::string>> shards;
    for (const auto& [key, file] : wm->items()) {
      if (!file.is_string()) fail(index_path, fmt::format("weight_map['{}'] is {}, not a file name", key, one_line(file.dump())));
      const std::string& name = file.get_ref<const std::string&>();
      if (!safe_relative(name))
        fail(index_path, fmt::format("weight_map['{}'] names shard '{}', which is not a file inside {}", key, name,
                                     path.string()));
      shards[name].push_back(key);
    }
    for (const auto& [name, keys] : shards) {
      const fs::path shard = path / name;
      if (!fs::is_regular_file(shard))
        fail(index_path, fmt::format("names shard '{}' ({} tensors, e.g. '{}') but {} does not exist", name,
                                     keys.size(), keys.front(), shard.string()));
    }
    for (const auto& [name, keys] : shards) {
      const SafetensorsFile* f = add_file(path / name);
      for (const std::string& key : keys) {
        const TensorInfo* t = f->find(key);
        if (t == nullptr)
          fail(f->path(), fmt::format("has no tensor '{}', which {} places in this shard", key, kIndexName));
        c.tensors_.emplace(key, Entry{f, t});
      }
    }
    return c;
  }

  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.path().extension() == ".safetensors" && e.is_regular_file()) found.push_back(e.path());
  if (ec) fail(path, fmt::format("cannot list: {}", ec.message()));
  if (found.empty())
    fail(path, fmt::format("no model.safetensors, {} or other *.safetensors file", kIndexName));
  std::sort(found.begin(), found.end());
  for (const fs::path& p : found) {
    const SafetensorsFile* f = add_file(p);
    for (const auto& [name, t] : f->tensors()) {
      auto [it, inserted] = c.tensors_.emplace(name, Entry{f, &t});
      if (!inserted)
        fail(path, fmt::format("tensor '{}' is in both {} and {}, and there is no {} to choose", name,
                               it->second.file->path().filename().string(), p.filename().string(), kIndexName));
    }
  }
  return c;
}

std::vector<std::string> Checkpoint::keys() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [k, e] : tensors_) out.push_back(k);
  return out;
}

std::optional<TensorView> Checkpoint::find(std::string_view key) const {
  auto it = tensors_.find(key);
  if (it == tensors_.end()) return std::nullopt;
  const TensorInfo& t = *it->second.tensor;
  return TensorView{t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size(), it->second.file};
}

TensorView Checkpoint::at(std::string_view key) const {
  if (auto v = find(key)) return *v;
  fail(path_, fmt::format("the checkpoint has no tensor '{}'", key));
}

}  // namespace fuselm::weights
