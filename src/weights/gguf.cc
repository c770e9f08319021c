#include "weights/gguf.h"


#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "weights/error.h"
#include "weights/safetensors.h"  // format_shape

namespace fuselm::weights {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxKeyBytes = 65535;  // the GGUF spec's limit on key length
constexpr int kMaxArrayDepth = 8;         // nested arrays: far beyond any real file

// ggml.c type_traits (block size, type size); ids without a layout (removed types) are absent.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},          {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},       {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 40},       {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},    {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},    {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98},  {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},   {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},          {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},         {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},        {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
};

/// Printable form of a name read from the file (control bytes escaped, long names cut), so that
/// an error stays one line whatever the file holds.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 200)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  if (s.size() > 200) out += "...";
  return out;
}

/// Size in bytes of a scalar of type t (0 for string and array, whose size is variable).
uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
    default: return 0;
  }
}

bool known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::f64); }

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::u8: return "u8";
    case GgufType::i8: return "i8";
    case GgufType::u16: return "u16";
    case GgufType::i16: return "i16";
    case GgufType::u32: return "u32";
    case GgufType::i32: return "i32";
    case GgufType::f32: return "f32";
    case GgufType::boolean: return "bool";
    case GgufType::string: return "string";
    case GgufType::array: return "array";
    case GgufType::u64: return "u64";
    case GgufType::i64: return "i64";
    case GgufType::f64: return "f64";
  }
  return "?";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::u8: case GgufType::i8: case GgufType::u16: case GgufType::i16:
    case GgufType::u32: case GgufType::i32: case GgufType::u64: case GgufType::i64: return true;
    default: return false;
  }
}

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::vector<int64_t> GgufTensor::shape() const { return {ne.rbegin(), ne.rend()}; }

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

/// Reads the mapped bytes front to back; every read checks that the bytes are there first.
class GgufParser {
 public:
  GgufParser(GgufFile& f, const unsigned char* base) : f_(f), base_(base) {}

  void parse() {
    if (f_.size_ < 24)
      fail(f_.path_, fmt::format("the file has {} bytes, fewer than the 24-byte GGUF header (truncated?)", f_.size_));
    const uint32_t magic = u32("the magic");
    if (magic != kMagic) fail(f_.path_, "does not start with the GGUF magic \"GGUF\" (not a GGUF file?)");
    f_.version_ = u32("the version");
    if (f_.version_ == 0x03000000 || f_.version_ == 0x02000000)
      fail(f_.path_, "is a big-endian GGUF; only little-endian files are supported");
    if (f_.version_ != 2 && f_.version_ != 3)
      fail(f_.path_, fmt::format("has GGUF version {}; versions 2 and 3 are supported", f_.version_));
    const uint64_t n_tensors = u64("the tensor count");
    const uint64_t n_kv = u64("the metadata count");
    // Each key/value takes at least 13 bytes and each tensor info at least 24: a count that the
    // rest of the file cannot hold is a lie, reported before anything is allocated for it.
    if (n_kv > remaining() / 13)
      fail(f_.path_, fmt::format("claims {} metadata entries, more than its {} remaining bytes can hold", n_kv, remaining()));
    for (uint64_t i = 0; i < n_kv; ++i) read_kv(i, n_kv);
    if (n_tensors > remaining() / 24)
      fail(f_.path_, fmt::format("claims {} tensors, more than the {} bytes after its metadata can hold", n_tensors,
                                 remaining()));
    read_alignment();
    std::vector<uint64_t> rel_offsets;
    for (uint64_t i = 0; i < n_tensors; ++i) rel_offsets.push_back(read_tensor_info(i, n_tensors));
    const uint64_t a = f_.alignment_;
    f_.data_offset_ = (pos_ + a - 1) / a * a;
    place_tensors(rel_offsets);
  }

 private:
  uint64_t remaining() const { return f_.size_ - pos_; }

  /// Fails unless `n` more bytes are there; `what` names the field (and key or tensor).
  void need(uint64_t n, const std::string& what) {
    if (n > remaining())
      fail(f_.path_, fmt::format("{} at byte {} needs {} bytes but only {} remain (truncated, or a count that lies?)",
                                 what, pos_, n, remaining()));
  }
  template <class T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));  // little-endian host (x86-64, aarch64)
    pos_ += sizeof(T);
    return v;
  }
  uint32_t u32(const std::string& what) { return read<uint32_t>(what); }
  uint64_t u64(const std::string& what) { return read<uint64_t>(what); }
  std::string str(const std::string& what) {
    const uint64_t len = u64(what + "'s length");
    need(len, fmt::format("{} ({} bytes)", what, len));
    std::string s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }

  GgufType value_type(const std::string& where) {
    const uint32_t t = u32(where + "'s value type");
    if (!known_type(t)) fail(f_.path_, fmt::format("{} has unknown value type {}", where, t));
    return static_cast<GgufType>(t);
  }

  void read_scalar(GgufType t, GgufValue& v, const std::string& where) {
    v.type = t;
    switch (t) {
      case GgufType::u8: v.u = read<uint8_t>(where); break;
      case GgufType::u16: v.u = read<uint16_t>(where); break;
      case GgufType::u32: v.u = read<uint32_t>(where); break;
      case GgufType::u64: v.u = read<uint64_t>(where); break;
      case GgufType::i8: v.i = read<int8_t>(where); break;
      case GgufType::i16: v.i = read<int16_t>(where); break;
      case GgufType::i32: v.i = read<int32_t>(where); break;
      case GgufType::i64: v.i = read<int64_t>(where); break;
      case GgufType::f32: v.f = read<float>(where); break;
      case GgufType::f64: v.f = read<double>(where); break;
      case GgufType::boolean: {
        const uint8_t b = read<uint8_t>(where);
        if (b > 1) fail(f_.path_, fmt::format("{} is a bool holding {}, not 0 or 1", where, b));
        v.b = b != 0;
        break;
      }
      case GgufType::string: v.s = str(where); break;
      case GgufType::array: break;  // read_value handles arrays
    }
  }

  void read_value(GgufType t, GgufValue& v, const std::string& where, int depth) {
    if (t != GgufType::array) return read_scalar(t, v, where);
    if (depth >= kMaxArrayDepth) fail(f_.path_, fmt::format("{} nests arrays deeper than {}", where, kMaxArrayDepth));
    v.type = GgufType::array;
    v.elem_type = value_type(where + "'s array element");
    const uint64_t n = u64(where + "'s array length");
    // The smallest element: a scalar's size, a string's or an array's length fields.
    const uint64_t min_elem = v.elem_type == GgufType::string  ? 8
                              : v.elem_type == GgufType::array ? 12
                                                               : scalar_size(v.elem_type);
    if (n > remaining() / min_elem)
      fail(f_.path_, fmt::format("{} claims an array of {} {} elements, more than the {} remaining bytes can hold",
                                 where, n, gguf_type_name(v.elem_type), remaining()));
    v.elems.resize(n);
    for (uint64_t i = 0; i < n; ++i) read_value(v.elem_type, v.elems[i], where, depth + 1);
  }

  void read_kv(uint64_t i, uint64_t n) {
    const std::string key = str(fmt::format("metadata entry {} of {}: key", i, n));
    const std::string where = fmt::format("key '{}'", printable(key));
    if (key.empty() || key.size() > kMaxKeyBytes)
      fail(f_.path_, fmt::format("metadata entry {} has a key of {} bytes (1 to {} allowed)", i, key.size(), kMaxKeyBytes));
    if (f_.values_.count(key)) fail(f_.path_, fmt::format("{} appears twice in the metadata", where));
    GgufValue v;
    read_value(value_type(where), v, where, 0);
    f_.keys_.push_back(key);
    f_.values_.emplace(key, std::move(v));
  }

  void read_alignment() {
    auto it = f_.values_.find("general.alignment");
    if (it == f_.values_.end()) return;
    const GgufValue& v = it->second;
    if (v.type != GgufType::u32 || v.u == 0 || (v.u & (v.u - 1)) != 0)
      fail(f_.path_, fmt::format("key 'general.alignment' must be a power-of-two u32, got {} {}", gguf_type_name(v.type),
                                 v.type == GgufType::u32 ? std::to_string(v.u) : std::string("value")));
    f_.alignment_ = v.u;
  }

  uint64_t read_tensor_info(uint64_t i, uint64_t n) {
    GgufTensor t;
    // A count that lies reads past the real infos: name the last good tensor for orientation.
    const std::string after =
        f_.tensors_.empty() ? std::string() : fmt::format(" (after tensor '{}')", printable(f_.tensors_.back().name));
    t.name = str(fmt::format("tensor info {} of {}{}: name", i, n, after));
    if (t.name.empty())
      fail(f_.path_, fmt::format("tensor info {} of {}{} has an empty name (a tensor count that lies?)", i, n, after));
    const std::string where = fmt::format("tensor '{}'", printable(t.name));
    if (f_.tensor_index_.count(t.name)) fail(f_.path_, fmt::format("{} appears twice", where));
    const uint32_t n_dims = u32(where + "'s dimension count");
    if (n_dims > GgufFile::kMaxDims)
      fail(f_.path_, fmt::format("{} has {} dimensions; ggml allows at most {}", where, n_dims, GgufFile::kMaxDims));
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = u64(where + "'s dimensions");
      if (ne > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, ne, &numel) ||
          numel > static_cast<uint64_t>(INT64_MAX))
        fail(f_.path_, fmt::format("{} has dimension {} = {}, whose element count overflows", where, d, ne));
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    const uint32_t type = u32(where + "'s type");
    t.type = ggml_type_info(type);
    if (!t.type) fail(f_.path_, fmt::format("{} has unknown ggml type {}", where, type));
    const int64_t row = t.ne.empty() ? 1 : t.ne[0];
    if (row % t.type->block_elems != 0)
      fail(f_.path_, fmt::format("{} has rows of {} elements, not a whole number of {}-element {} blocks", where, row,
                                 t.type->block_elems, t.type->name));
    const uint64_t offset = u64(where + "'s offset");
    if (offset % f_.alignment_ != 0)
      fail(f_.path_, fmt::format("{} has offset {}, not a multiple of the alignment {}", where, offset, f_.alignment_));
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
    return offset;
  }

  /// Bounds and overlap of the tensors' bytes, now that the data offset is known.
  void place_tensors(const std::vector<uint64_t>& rel) {
    if (f_.tensors_.empty()) return;
    if (f_.data_offset_ > f_.size_)
      fail(f_.path_, fmt::format("the data section starts at byte {}, past the end of the {}-byte file (truncated?)",
                                 f_.data_offset_, f_.size_));
    const uint64_t data_bytes = f_.size_ - f_.data_offset_;
    std::vector<size_t> order(f_.tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t i = 0; i < order.size(); ++i) {
      GgufTensor& t = f_.tensors_[i];
      const uint64_t nbytes =
          static_cast<uint64_t>(t.numel() / t.type->block_elems) * static_cast<uint64_t>(t.type->block_bytes);
      if (rel[i] > data_bytes || nbytes > data_bytes - rel[i])
        fail(f_.path_, fmt::format("tensor '{}' ({} {}, {} bytes at data offset {}) ends past the end of the file, "
                                   "whose data section has {} bytes (truncated?)",
                                   printable(t.name), t.type->name, format_shape(t.shape()), nbytes, rel[i], data_bytes));
      t.file_offset = f_.data_offset_ + rel[i];
      t.bytes = {reinterpret_cast<const std::byte*>(base_ + t.file_offset), nbytes};
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rel[a] < rel[b]; });
    for (size_t i = 1; i < order.size(); ++i) {
      const GgufTensor& prev = f_.tensors_[order[i - 1]];
      const GgufTensor& next = f_.tensors_[order[i]];
      if (rel[order[i - 1]] + prev.bytes.size() > rel[order[i]] && !prev.bytes.empty() && !next.bytes.empty())
        fail(f_.path_, fmt::format("tensor '{}' (data offset {}, {} bytes) overlaps tensor '{}' at data offset {}",
                                   printable(prev.name), rel[order[i - 1]], prev.bytes.size(), printable(next.name),
                                   rel[order[i]]));
    }
  }

  GgufFile& f_;
  const unsigned char* base_;
  uint64_t pos_ = 0;
};

GgufFile GgufFile::open(const std::filesystem::path& path) {
  GgufFile f;
  f.path_ = path;
  try {
    f.map_ = base::MappedFile::open(path);
  } catch (const base::MapError& e) {
    fail(path, e.what());
  }
  f.size_ = f.map_.size();
  if (f.size_ == 0) fail(path, "the file is empty (not a GGUF file)");
  GgufParser(f, f.map_.data()).parse();
  return f;
}


const GgufValue* GgufFile::find_value(std::string_view key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::value(std::string_view key) const {
  if (const GgufValue* v = find_value(key)) return *v;
  fail(path_, fmt::format("has no metadata key '{}'", key));
}

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::string)
    fail(path_, fmt::format("key '{}' is a {}, expected a string", key, gguf_type_name(v.type)));
  return v.s;
}

uint64_t GgufFile::get_uint(std::string_view key) const {
  const GgufValue& v = value(key);
  if (!v.is_integer()) fail(path_, fmt::format("key '{}' is a {}, expected an integer", key, gguf_type_name(v.type)));
  const bool is_signed = v.type == GgufType::i8 || v.type == GgufType::i16 || v.type == GgufType::i32 ||
                         v.type == GgufType::i64;
  if (is_signed && v.i < 0) fail(path_, fmt::format("key '{}' is {}, expected a non-negative integer", key, v.i));
  return is_signed ? static_cast<uint64_t>(v.i) : v.u;
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = value(key);
  if (!v.is_integer()) fail(path_, fmt::format("key '{}' is a {}, expected an integer", key, gguf_type_name(v.type)));
  if (v.type == GgufType::u64 && v.u > static_cast<uint64_t>(INT64_MAX))
    fail(path_, fmt::format("key '{}' is {}, beyond the signed 64-bit range", key, v.u));
  const bool is_unsigned = v.type == GgufType::u8 || v.type == GgufType::u16 || v.type == GgufType::u32 ||
                           v.type == GgufType::u64;
  return is_unsigned ? static_cast<int64_t>(v.u) : v.i;
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.is_float()) return v.f;
  if (v.is_integer()) return static_cast<double>(get_int(key));
  fail(path_, fmt::format("key '{}' is a {}, expected a number", key, gguf_type_name(v.type)));
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::boolean)
    fail(path_, fmt::format("key '{}' is a {}, expected a bool", key, gguf_type_name(v.type)));
  return v.b;
}

const GgufTensor* GgufFile::find(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::at(std::string_view name) const {
  if (const GgufTensor* t = find(name)) return *t;
  fail(path_, fmt::format("has no tensor '{}'", name));
}

}  // namespace fuselm::weights
