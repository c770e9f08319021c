#pragma once
// Reading tokenizer.json with errors that name the file and the field: a Field is a JSON value
// plus its dotted path ("pre_tokenizer.pretokenizers[1].pattern"). Every accessor throws
// std::runtime_error("<file>: <path> ...") when the value is missing or has the wrong type.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fuselm::tokenizer {

class Field {
 public:
  /// `file` names the source in messages; it must outlive the Field.
  Field(const nlohmann::json& value, std::string path, const std::string& file)
      : value_(&value), path_(std::move(path)), file_(&file) {}

  /// Required member `key` of this object (present and not null).
  Field operator[](std::string_view key) const;
  /// Member `key`, or nullopt when it is absent or null.
  std::optional<Field> get(std::string_view key) const;
  /// Element i of this array.
  Field at(std::size_t i) const;

  bool is_null() const { return value_->is_null(); }
  bool is_string() const { return value_->is_string(); }
  bool is_array() const { return value_->is_array(); }
  bool is_object() const { return value_->is_object(); }
  /// Number of elements of this array or object.
  std::size_t size() const;

  const std::string& str() const;
  bool boolean() const;
  std::uint32_t u32() const;
  /// Member `key` as a bool, or `fallback` when it is absent or null.
  bool flag(std::string_view key, bool fallback) const;

  const nlohmann::json& json() const { return *value_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return *file_; }

  /// Throws "<file>: <path> <what>".
  [[noreturn]] void fail(std::string_view what) const;
  /// Throws "<file>: <path> '<value>' is not supported".
  [[noreturn]] void unsupported(std::string_view value) const;

 private:
  void expect(bool ok, std::string_view kind) const;

  const nlohmann::json* value_;
  std::string path_;
  const std::string* file_;
};

}  // namespace fuselm::tokenizer
