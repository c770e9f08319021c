#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace fuselm::tokenizer::byte_level {
namespace {

struct Tables {
  std::array<std::string, 256> chars;  // byte -> UTF-8 of its code point
  std::array<int, 512> bytes;          // code point -> byte, or -1 (code points stay below 512)
  Tables() {
    bytes.fill(-1);
    // GPT-2's bytes_to_unicode: printable Latin-1 bytes keep their code point, the other bytes
    // take 256, 257, ... in byte order.
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const int cp = printable ? b : 256 + n++;
      utf8::append(chars[b], static_cast<char32_t>(cp));
      bytes[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& char_of(unsigned char b) { return tables().chars[b]; }

void encode(std::string_view text, std::string& out) {
  const Tables& t = tables();
  for (char c : text) out += t.chars[static_cast<unsigned char>(c)];
}

bool decode(std::string_view token, std::string& out) {
  const Tables& t = tables();
  const std::size_t mark = out.size();
  for (std::size_t i = 0; i < token.size();) {
    const auto b0 = static_cast<unsigned char>(token[i]);
    int cp = -1;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = ((b0 & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    }
    if (cp < 0 || cp >= 512 || t.bytes[cp] < 0) {
      out.resize(mark);
      return false;
    }
    out.push_back(static_cast<char>(t.bytes[cp]));
  }
  return true;
}

}  // namespace fuselm::tokenizer::byte_level
