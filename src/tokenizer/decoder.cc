#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"

namespace fuselm::tokenizer {
namespace {

class ByteLevelDecoder final : public Decoder {
 public:
  void append(std::string_view token, bool, std::string& out) const override {
    // A token with a character outside the byte alphabet (an added token such as "<|im_end|> "
    // with a real space) stands for its own UTF-8 bytes.
    if (!byte_level::decode(token, out)) out.append(token);
  }
};

class JoinDecoder final : public Decoder {
 public:
  void append(std::string_view token, bool first, std::string& out) const override {
    if (!first) out.push_back(' ');
    out.append(token);
  }
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const std::optional<Field>& spec) {
  if (!spec) return std::make_unique<JoinDecoder>();
  const Field type = (*spec)["type"];
  if (type.str() == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  type.unsupported(type.str());
}

}  // namespace fuselm::tokenizer
