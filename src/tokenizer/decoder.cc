#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern_field.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace fuselm::tokenizer {
namespace {

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(DecodeState& s) const override {
    std::string bytes;
    for (const std::string& token : s.tokens) {
      // A token with a character outside the byte alphabet (an added token such as "<|im_end|> "
      // with a real space) stands for its own UTF-8 bytes.
      if (!byte_level::decode(token, bytes)) bytes.append(token);
    }
    s.tokens.assign(1, std::move(bytes));
    s.fused = true;
  }
};

class JoinDecoder final : public Decoder {
 public:
  void decode_chain(DecodeState& s) const override {
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
      if (i > 0 || !s.first) s.tokens[i].insert(0, " ");
    }
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Regex regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  void decode_chain(DecodeState& s) const override {
    std::vector<Span> matches;
    for (std::string& token : s.tokens) {
      if (!utf8::is_valid(token)) continue;  // raw bytes of ByteLevel are not text to match
      matches.clear();
      regex_.find_all(token, matches);
      if (matches.empty()) continue;
      std::string out;
      std::size_t prev = 0;
      for (const Span& m : matches) {
        out.append(token, prev, m.start - prev);
        out += content_;
        prev = m.end;
      }
      out.append(token, prev);
      token = std::move(out);
    }
  }

 private:
  Regex regex_;
  std::string content_;
};

// "<0xXX>" -> the byte, as HF (from_str_radix accepts either case).
std::optional<unsigned char> byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

// ByteFallback: a run of "<0xXX>" tokens becomes its bytes when they are valid UTF-8, else one
// U+FFFD per byte (HF's rule, not the lossy conversion).
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(DecodeState& s) const override {
    std::vector<std::string> out;
    out.reserve(s.tokens.size());
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      if (utf8::is_valid(run)) {
        out.push_back(run);
      } else {
        for (std::size_t i = 0; i < run.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
    };
    for (std::string& token : s.tokens) {
      if (auto b = byte_token(token)) {
        run.push_back(static_cast<char>(*b));
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    s.tokens = std::move(out);
  }
  std::size_t unstable_tail(const std::vector<std::string>& tokens) const override {
    std::size_t n = 0;
    while (n < tokens.size() && byte_token(tokens[tokens.size() - 1 - n])) ++n;
    return n;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(DecodeState& s) const override {
    std::string all;
    for (const std::string& t : s.tokens) all += t;
    s.tokens.assign(1, std::move(all));
    s.fused = true;
  }
};

// Strip: up to `start` leading and `stop` trailing `content` characters of each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, std::size_t start, std::size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(DecodeState& s) const override {
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
      std::string& token = s.tokens[i];
      if (!utf8::is_valid(token)) continue;
      std::vector<char32_t> cps = unicode::code_points(token);
      // After Fuse the one token of a later window continues the text: its start is not the
      // text's start.
      const bool at_text_start = !s.fused || s.first;
      std::size_t a = 0;
      while (at_text_start && a < start_ && a < cps.size() && cps[a] == content_) ++a;
      std::size_t b = cps.size();
      for (std::size_t k = 0; k < stop_ && b > a && cps[b - 1] == content_; ++k) --b;
      token = unicode::to_utf8(std::vector<char32_t>(cps.begin() + a, cps.begin() + b));
    }
  }

 private:
  char32_t content_;
  std::size_t start_, stop_;
};

// Metaspace: the replacement character becomes a space, except in the first token of the text,
// where it is dropped (unless prepend_scheme is "never").
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_first)
      : replacement_(std::move(replacement)), drop_first_(drop_first) {}
  void decode_chain(DecodeState& s) const override {
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
      std::string& token = s.tokens[i];
      const bool drop = drop_first_ && i == 0 && s.first;
      std::string out;
      for (std::size_t p = 0; p < token.size();) {
        if (token.compare(p, replacement_.size(), replacement_) == 0) {
          if (!drop) out.push_back(' ');
          p += replacement_.size();
        } else {
          out.push_back(token[p++]);
        }
      }
      token = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool drop_first_;
};

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  std::size_t prev = 0;
  for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, prev)) {
    out.append(s, prev, p - prev);
    out += to;
    prev = p + from.size();
  }
  if (prev == 0) return;
  out.append(s, prev);
  s = std::move(out);
}

// WordPiece: "##" continues the previous token, any other token starts a new word; cleanup
// undoes BERT's spaces before punctuation and contractions (HF's wordpiece::cleanup).
class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(DecodeState& s) const override {
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
      std::string& token = s.tokens[i];
      if (i > 0 || !s.first) {
        if (token.compare(0, prefix_.size(), prefix_) == 0) {
          const std::size_t p = token.find(prefix_);  // replacen(prefix, "", 1)
          token.erase(p, prefix_.size());
        } else {
          token.insert(0, " ");
        }
      }
      if (cleanup_) {
        static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
            {" .", "."},   {" ?", "?"},   {" !", "!"},   {" ,", ","},
            {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"},
            {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
        for (const auto& [from, to] : kRules) replace_all(token, from, to);
      }
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void decode_chain(DecodeState& s) const override {
    for (const auto& step : steps_) step->decode_chain(s);
  }
  std::size_t unstable_tail(const std::vector<std::string>& tokens) const override {
    std::size_t n = 0;
    for (const auto& step : steps_) n = std::max(n, step->unstable_tail(tokens));
    return n;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

char32_t one_char(const Field& f) {
  const std::string& s = f.str();
  if (s.empty() || utf8::char_length(s, 0) != s.size()) f.fail("must be one character");
  return unicode::code_points(s)[0];
}

std::unique_ptr<Decoder> make_step(const Field& spec, bool& fused);

std::unique_ptr<Decoder> make_strip(const Field& spec, bool fused) {
  const std::size_t stop = spec["stop"].u32();
  // A trailing strip of the joined text depends on which token is last, which a stream cannot
  // know; HF's converted tokenizers only strip the start.
  if (fused && stop > 0) spec["stop"].fail("> 0 after Fuse is not supported");
  return std::make_unique<StripDecoder>(one_char(spec["content"]), spec["start"].u32(), stop);
}

std::unique_ptr<Decoder> make_step(const Field& spec, bool& fused) {
  const Field type = spec["type"];
  const std::string& t = type.str();
  if (t == "ByteLevel") {
    fused = true;
    return std::make_unique<ByteLevelDecoder>();
  }
  if (t == "Fuse") {
    fused = true;
    return std::make_unique<FuseDecoder>();
  }
  if (t == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (t == "Replace") {
    return std::make_unique<ReplaceDecoder>(pattern_regex(spec["pattern"]),
                                            spec["content"].str());
  }
  if (t == "Strip") return make_strip(spec, fused);
  if (t == "Metaspace") {
    bool drop_first = true;
    if (auto p = spec.get("prepend_scheme")) drop_first = p->str() != "never";
    else drop_first = spec.flag("add_prefix_space", true);
    one_char(spec["replacement"]);
    return std::make_unique<MetaspaceDecoder>(spec["replacement"].str(), drop_first);
  }
  if (t == "WordPiece") {
    const auto prefix = spec.get("prefix");
    return std::make_unique<WordPieceDecoder>(prefix ? prefix->str() : "##",
                                              spec.flag("cleanup", true));
  }
  if (t == "Sequence") {
    const Field list = spec["decoders"];
    std::vector<std::unique_ptr<Decoder>> steps;
    for (std::size_t i = 0; i < list.size(); ++i) steps.push_back(make_step(list.at(i), fused));
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  type.unsupported(t);
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const std::optional<Field>& spec) {
  if (!spec) return std::make_unique<JoinDecoder>();
  bool fused = false;
  return make_step(*spec, fused);
}

std::string decode_tokens(const Decoder& decoder, std::vector<std::string> tokens, bool first) {
  DecodeState state{std::move(tokens), first, false};
  decoder.decode_chain(state);
  std::string out;
  for (const std::string& t : state.tokens) out += t;
  return out;
}

}  // namespace fuselm::tokenizer
