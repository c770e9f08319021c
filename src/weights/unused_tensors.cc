#include "weights/unused_tensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string_view>

#include "weights/error.h"

namespace fuselm::weights {
namespace {

/// A key cut at its dots: "model.layers.3.mlp" -> {"model", "layers", "3", "mlp"}.
std::vector<std::string_view> split_path(std::string_view key) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  while (true) {
    const size_t dot = key.find('.', begin);
    parts.push_back(key.substr(begin, dot == std::string_view::npos ? std::string_view::npos : dot - begin));
    if (dot == std::string_view::npos) return parts;
    begin = dot + 1;
  }
}

/// The integer a path component spells, or -1 (not all digits, empty, or too long to matter).
long long index_of(std::string_view part) {
  if (part.empty() || part.size() > 9) return -1;
  long long v = 0;
  for (char c : part) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

/// The key with component i replaced by a mark no key contains ("model.layers.\x01.mlp").
std::string template_of(const std::vector<std::string_view>& parts, size_t i) {
  std::string t;
  for (size_t j = 0; j < parts.size(); ++j) {
    if (j) t += '.';
    t += j == i ? std::string_view("\x01") : parts[j];
  }
  return t;
}

std::string first_names(const std::vector<std::string>& keys, size_t n) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < n; ++i) out += (i ? ", " : "") + keys[i];
  if (keys.size() > n) out += ", ...";
  return out;
}

/// key -> index into `out` for every key an entry of the IR's unread_modules names; `out` gets one
/// UnreadModule per entry (tensors counted later, against the checkpoint).
std::map<std::string, size_t, std::less<>> unread_keys(const nlohmann::json& unread_modules,
                                                       std::vector<UnreadModule>& out) {
  std::map<std::string, size_t, std::less<>> owner;
  if (!unread_modules.is_array()) return owner;
  for (const auto& m : unread_modules) {
    if (!m.is_object() || !m.contains("keys") || !m["keys"].is_array()) continue;
    UnreadModule u;
    if (m.contains("module") && m["module"].is_string()) u.module = m["module"].get<std::string>();
    if (m.contains("checkpoint_prefix") && m["checkpoint_prefix"].is_string())
      u.checkpoint_prefix = m["checkpoint_prefix"].get<std::string>();
    for (const auto& k : m["keys"])
      if (k.is_string()) owner.emplace(k.get<std::string>(), out.size());
    out.push_back(std::move(u));
  }
  return owner;
}

/// "vision_tower.* (412 tensors, module model.vision_tower)", joined by ", ".
std::string unread_summary(const std::vector<UnreadModule>& modules) {
  std::string out;
  for (const auto& m : modules) {
    if (m.tensors == 0) continue;
    if (!out.empty()) out += ", ";
    out += fmt::format("{}* ({} tensors, module {})", m.checkpoint_prefix, m.tensors, m.module);
  }
  return out;
}

}  // namespace

UnusedTensors find_unused_tensors(const nlohmann::json& parameters, const std::vector<std::string>& checkpoint_keys,
                                  const nlohmann::json& unread_modules) {
  std::set<std::string, std::less<>> read;
  if (parameters.is_object())
    for (const auto& [target, p] : parameters.items()) {
      if (!p.is_object() || !p.contains("checkpoint") || !p["checkpoint"].is_object()) continue;
      const auto keys = p["checkpoint"].find("keys");
      if (keys == p["checkpoint"].end() || !keys->is_array()) continue;
      for (const auto& k : *keys)
        if (k.is_string()) read.insert(k.get<std::string>());
    }
  // template (one integer component marked) -> highest integer read there, and the key holding it
  std::map<std::string, std::pair<long long, std::string>, std::less<>> highest;
  for (const auto& key : read) {
    const auto parts = split_path(key);
    for (size_t i = 0; i < parts.size(); ++i) {
      const long long v = index_of(parts[i]);
      if (v < 0) continue;
      auto [it, fresh] = highest.try_emplace(template_of(parts, i), v, key);
      if (!fresh && v > it->second.first) it->second = {v, key};
    }
  }
  UnusedTensors out;
  const auto owner = unread_keys(unread_modules, out.unread_modules);
  for (const auto& key : checkpoint_keys) {
    if (read.contains(key)) continue;
    if (auto it = owner.find(key); it != owner.end()) {
      ++out.unread_modules[it->second].tensors;
      continue;
    }
    out.keys.push_back(key);
    const auto parts = split_path(key);
    for (size_t i = 0; i < parts.size(); ++i) {
      const long long v = index_of(parts[i]);
      if (v < 0) continue;
      auto it = highest.find(template_of(parts, i));
      if (it == highest.end() || v <= it->second.first) continue;
      if (out.beyond_read.empty()) out.highest_read = it->second.second;
      out.beyond_read.push_back(key);
      break;
    }
  }
  std::sort(out.keys.begin(), out.keys.end());
  return out;
}

void check_unused_tensors(const nlohmann::json& parameters, const nlohmann::json& unread_modules,
                          const Checkpoint& checkpoint, bool allow) {
  const UnusedTensors u = find_unused_tensors(parameters, checkpoint.keys(), unread_modules);
  const std::string where = checkpoint.path().string();
  if (const std::string modules = unread_summary(u.unread_modules); !modules.empty())
    std::fprintf(stderr, "fuselm: note: %s: not loaded, the model's graph never reads them (on token ids alone, within its context): %s\n",
                 where.c_str(), modules.c_str());
  if (u.keys.empty()) return;
  if (!u.beyond_read.empty() && !allow)
    throw WeightsError(fmt::format(
        "{}: {} checkpoint tensors are read by no graph parameter, {} of them in numbered blocks beyond the last the "
        "graph reads ({}; the graph reads up to {}): config.json describes fewer layers or experts than the checkpoint "
        "holds? Fix config.json, or pass --allow-unused-weights to run without them",
        where, u.keys.size(), u.beyond_read.size(), first_names(u.beyond_read, 3), u.highest_read));
  std::fprintf(stderr, "fuselm: warning: %s: %zu checkpoint tensors are read by no graph parameter (%s)%s\n",
               where.c_str(), u.keys.size(), first_names(u.keys, 3).c_str(),
               u.beyond_read.empty() ? "" : "; running without them (--allow-unused-weights)");
}

}  // namespace fuselm::weights
