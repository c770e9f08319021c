#pragma once
// Helpers for the weights tests: a temporary directory and a safetensors writer that builds the
// header by hand (so tests can also write broken files).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "weights/error.h"

namespace fuselm::weights::test_util {

/// The WeightsError message `fn` throws (fails the test when it throws nothing, or more than one line).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const WeightsError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "not one line: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no WeightsError thrown";
  return {};
}

#define EXPECT_CONTAINS(haystack, needle)                                   \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "'" << (haystack) << "' lacks '" << (needle) << "'"

/// A fresh directory under $TMPDIR, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fuselm_weights_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

/// One tensor to write: header dtype name ("F32", ...), shape, raw little-endian bytes.
struct StTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

template <typename T>
std::string raw_bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

inline StTensor f32_tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
  return {std::move(name), "F32", std::move(shape), raw_bytes(v)};
}

inline StTensor bf16_tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
  std::vector<uint16_t> h;
  for (float f : v) h.push_back(kernels::f32_to_bf16(f));
  return {std::move(name), "BF16", std::move(shape), raw_bytes(h)};
}

inline StTensor f16_tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
  std::vector<uint16_t> h;
  for (float f : v) h.push_back(kernels::f32_to_f16(f));
  return {std::move(name), "F16", std::move(shape), raw_bytes(h)};
}

/// Writes 8-byte little-endian `header_len` (the real length unless overridden), the header text and
/// the data, exactly as given.
inline void write_raw(const std::filesystem::path& path, const std::string& header, const std::string& data,
                      int64_t header_len = -1) {
  const uint64_t n = header_len < 0 ? header.size() : static_cast<uint64_t>(header_len);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out += data;
  std::ofstream f(path, std::ios::binary);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
}

/// The header JSON for `tensors` laid out back to back (plus optional metadata), padded with spaces
/// to a multiple of 8 bytes as the Python writer does.
inline std::string header_for(const std::vector<StTensor>& tensors, std::string* data,
                              const nlohmann::json& metadata = nullptr) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.is_null()) h["__metadata__"] = metadata;
  data->clear();
  for (const StTensor& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data->size(), data->size() + t.bytes.size()}}};
    *data += t.bytes;
  }
  std::string s = h.dump();
  while (s.size() % 8 != 0) s += ' ';
  return s;
}

/// A valid safetensors file holding `tensors`.
inline void write_safetensors(const std::filesystem::path& path, const std::vector<StTensor>& tensors,
                              const nlohmann::json& metadata = nullptr) {
  std::string data;
  const std::string header = header_for(tensors, &data, metadata);
  write_raw(path, header, data);
}

/// One IR parameters-table entry as capture writes it for a single-key parameter.
inline nlohmann::json ir_param(const std::string& key, std::vector<int64_t> shape, const std::string& file_dtype,
                               const std::string& file = "model.safetensors") {
  return {{"shape", shape},
          {"dtype", "f32"},
          {"checkpoint", {{"keys", {key}}, {"converter", nullptr}, {"file", file}, {"dtype", file_dtype}, {"shape", shape}}}};
}

}  // namespace fuselm::weights::test_util
