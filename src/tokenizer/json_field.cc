#include "tokenizer/json_field.h"

#include <limits>
#include <stdexcept>

namespace fuselm::tokenizer {

Field Field::operator[](std::string_view key) const {
  auto f = get(key);
  if (!f) {
    const std::string p = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
    throw std::runtime_error(*file_ + ": " + p + " is missing");
  }
  return *f;
}

std::optional<Field> Field::get(std::string_view key) const {
  expect(value_->is_object(), "an object");
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return Field(*it, path_.empty() ? std::string(key) : path_ + "." + std::string(key), *file_);
}

Field Field::at(std::size_t i) const {
  expect(value_->is_array(), "an array");
  return Field((*value_)[i], path_ + "[" + std::to_string(i) + "]", *file_);
}

std::size_t Field::size() const {
  expect(value_->is_array() || value_->is_object(), "an array or object");
  return value_->size();
}

const std::string& Field::str() const {
  expect(value_->is_string(), "a string");
  return value_->get_ref<const std::string&>();
}

bool Field::boolean() const {
  expect(value_->is_boolean(), "a bool");
  return value_->get<bool>();
}

std::uint32_t Field::u32() const {
  expect(value_->is_number_unsigned() ||
             (value_->is_number_integer() && value_->get<std::int64_t>() >= 0),
         "a non-negative integer");
  const auto v = value_->get<std::uint64_t>();
  if (v > std::numeric_limits<std::uint32_t>::max()) {
    fail("is out of range (" + std::to_string(v) + ")");
  }
  return static_cast<std::uint32_t>(v);
}

bool Field::flag(std::string_view key, bool fallback) const {
  auto f = get(key);
  return f ? f->boolean() : fallback;
}

void Field::fail(std::string_view what) const {
  throw std::runtime_error(*file_ + ": " + (path_.empty() ? std::string("(root)") : path_) + " " +
                           std::string(what));
}

void Field::unsupported(std::string_view value) const {
  fail("'" + std::string(value) + "' is not supported");
}

void Field::expect(bool ok, std::string_view kind) const {
  if (!ok) fail("must be " + std::string(kind) + ", got " + value_->type_name());
}

}  // namespace fuselm::tokenizer
