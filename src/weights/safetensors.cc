#include "weights/safetensors.h"


#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/json_limited.h"
#include "weights/error.h"

namespace fuselm::weights {

namespace {

/// A header is {name: {"dtype", "shape": [..], "data_offsets": [..]}, "__metadata__": {..}}: three
/// levels. Deeper JSON is no header, and would overflow the stack of dump() in our messages.
constexpr int kMaxHeaderDepth = 8;

/// nlohmann's messages are one line already; make sure, since ours must be.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

uint64_t read_le_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

/// Parses a non-negative JSON integer; false for anything else (negative, fractional, not a number).
bool as_u64(const nlohmann::json& j, uint64_t& out) {
  if (!j.is_number_unsigned()) return false;  // nlohmann parses every integer >= 0 as unsigned
  out = j.get<uint64_t>();
  return true;
}

/// Parses one tensor entry of the header into `t` (bytes still unset); throws naming the tensor.
void parse_entry(const std::filesystem::path& path, const std::string& name, const nlohmann::json& e,
                 TensorInfo& t, uint64_t& begin, uint64_t& end) {
  auto bad = [&](const std::string& what) { fail(path, fmt::format("tensor '{}' {}", name, what)); };
  if (!e.is_object()) bad(fmt::format("has header entry {}, not an object", one_line(e.dump())));
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) bad("has no \"dtype\" string in the header");
  auto parsed = parse_file_dtype(dt->get_ref<const std::string&>());
  if (!parsed) bad(fmt::format("has unknown dtype {}", dt->dump()));
  t.dtype = *parsed;

  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) bad("has no \"shape\" list in the header");
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    uint64_t v = 0;
    if (!as_u64(d, v) || v > static_cast<uint64_t>(INT64_MAX))
      bad(fmt::format("has shape {}, whose dimensions must be non-negative integers", one_line(sh->dump())));
    if (__builtin_mul_overflow(numel, v, &numel))
      bad(fmt::format("has shape {}, whose element count overflows", one_line(sh->dump())));
    t.shape.push_back(static_cast<int64_t>(v));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(t.dtype)), &nbytes))
    bad(fmt::format("has shape {}, whose byte count overflows", one_line(sh->dump())));

  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !as_u64((*off)[0], begin) ||
      !as_u64((*off)[1], end))
    bad("has no \"data_offsets\": [begin, end] of non-negative integers in the header");
  if (begin > end) bad(fmt::format("has data_offsets [{}, {}], which end before they begin", begin, end));
  if (end - begin != nbytes)
    bad(fmt::format("has data_offsets [{}, {}] ({} bytes) but shape {} of {} needs {} bytes", begin, end,
                    end - begin, format_shape(t.shape), file_dtype_name(t.dtype),
                    nbytes));
}

}  // namespace

std::string format_shape(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path, const OpenOptions& options) {
  SafetensorsFile f;
  f.path_ = path;

  try {
    f.map_ = base::MappedFile::open(path);
  } catch (const base::MapError& e) {
    fail(path, e.what());
  }
  f.size_ = f.map_.size();
  if (f.size_ < 8)
    fail(path, fmt::format("the file has {} bytes, fewer than the 8-byte header length (truncated?)", f.size_));
  const unsigned char* bytes = f.map_.data();

  const uint64_t header_len = read_le_u64(bytes);
  if (header_len > kMaxHeaderBytes)
    fail(path, fmt::format("header length {} exceeds the safetensors limit of {} bytes (not a safetensors file?)",
                           header_len, kMaxHeaderBytes));
  if (header_len > f.size_ - 8)
    fail(path, fmt::format("header length {} goes past the end of the file, which has {} bytes (truncated, or "
                           "not a safetensors file?)",
                           header_len, f.size_));
  f.data_offset_ = 8 + header_len;

  // Parse, noting duplicate tensor names (nlohmann keeps the last one silently).
  std::set<std::string> seen;
  std::string duplicate;
  nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& v) {
    if (ev == nlohmann::json::parse_event_t::key && depth == 1 && v.is_string()) {
      if (!seen.insert(v.get<std::string>()).second && duplicate.empty()) duplicate = v.get<std::string>();
    }
    return true;
  };
  nlohmann::json header;
  const auto* hbegin = reinterpret_cast<const char*>(bytes + 8);
  try {
    header = base::parse_json_limited(hbegin, hbegin + header_len, kMaxHeaderDepth, cb);
  } catch (const nlohmann::json::exception& e) {
    fail(path, fmt::format("the {}-byte header is not valid JSON: {}", header_len, one_line(e.what())));
  } catch (const base::JsonTooDeep& e) {
    fail(path, fmt::format("the {}-byte header is not a safetensors header: {}", header_len, e.what()));
  }
  if (!header.is_object()) fail(path, fmt::format("the header is JSON {}, not an object of tensors", header.type_name()));
  if (!duplicate.empty()) fail(path, fmt::format("tensor '{}' appears twice in the header", duplicate));

  const uint64_t data_bytes = f.size_ - f.data_offset_;
  const auto* data = reinterpret_cast<const std::byte*>(bytes + f.data_offset_);
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "\"__metadata__\" in the header is not an object");
      f.metadata_ = std::move(entry);
      continue;
    }
    TensorInfo t;
    t.name = name;
    uint64_t begin = 0, end = 0;
    parse_entry(path, name, entry, t, begin, end);
    if (end > data_bytes)
      fail(path, fmt::format("tensor '{}' ends at byte {} but the file has {} bytes (truncated?)", name,
                             f.data_offset_ + end, f.size_));
    t.bytes = std::span<const std::byte>(data + begin, end - begin);
    f.tensors_.emplace(name, std::move(t));
  }
  if (options.willneed) f.map_.will_need();
  return f;
}


const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorInfo& SafetensorsFile::at(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  fail(path_, fmt::format("has no tensor '{}'", name));
}

}  // namespace fuselm::weights
