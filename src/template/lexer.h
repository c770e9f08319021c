#pragma once
// The template lexer: splits a Jinja source into text and tag tokens with jinja2's whitespace
// rules as transformers configures them (trim_blocks, lstrip_blocks, `-`/`+` markers, newlines
// normalised to \n, one trailing newline dropped).
#include <cstdint>
#include <string>
#include <vector>

namespace fuselm::tmpl {

enum class Tok : uint8_t { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // Text: the data; Name/Op: the spelling; String: the decoded value
  int line = 1;
  int64_t i = 0;     // Int
  double f = 0;      // Float
};

/// Tokenizes `source`; throws TemplateError("line N: ...") on an unterminated tag or string or a
/// character no Jinja token starts with.
std::vector<Token> lex(const std::string& source);

}  // namespace fuselm::tmpl
