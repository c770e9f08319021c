#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

namespace fuselm::tokenizer {
namespace {

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(utf8proc_option_t options) : options_(options) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                static_cast<utf8proc_ssize_t>(text.size()), &out, options_);
    if (n < 0) {
      throw std::runtime_error(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
    }
    std::string result(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
    std::free(out);
    return result;
  }

 private:
  utf8proc_option_t options_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& step : steps_) s = step->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Field& spec) {
  const Field type = spec["type"];
  const std::string& t = type.str();
  if (t == "Sequence") {
    const Field list = spec["normalizers"];
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (std::size_t i = 0; i < list.size(); ++i) steps.push_back(make_normalizer(list.at(i)));
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  int form = 0;
  if (t == "NFC") form = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  else if (t == "NFD") form = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
  else if (t == "NFKC") form = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  else if (t == "NFKD") form = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  else type.unsupported(t);
  return std::make_unique<UnicodeForm>(static_cast<utf8proc_option_t>(form));
}

}  // namespace fuselm::tokenizer
