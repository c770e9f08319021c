// The fuzz targets' contract (fuzz/*_fuzz.cc) on every committed input: the seed corpora
// (fuzz/corpus/<target>/) and each crash a fuzz run found (fuzz/regressions/<target>/, the input
// libFuzzer saved, renamed for what it broke). Each parser either accepts the input or throws its
// documented one-line error; anything else (another exception, a crash, a sanitizer report under
// scripts/test.sh --sanitize) fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/json_limited.h"
#include "ir/load.h"
#include "server/chat_output_parser.h"
#include "server/request_fields.h"
#include "server/request_limits.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "weights/error.h"
#include "weights/gguf.h"
#include "weights/safetensors.h"

#ifndef FUSELM_SOURCE_DIR
#define FUSELM_SOURCE_DIR "."
#endif

namespace fuselm {
namespace fuzz_regression_test {
namespace fs = std::filesystem;

std::vector<fs::path> inputs(const std::string& target) {
  std::vector<fs::path> out;
  for (const char* set : {"corpus", "regressions"}) {
    const fs::path dir = fs::path(FUSELM_SOURCE_DIR) / "fuzz" / set / target;
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().filename().string()[0] != '.') out.push_back(e.path());
  }
  return out;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void expect_one_line(const std::exception& e, const fs::path& input) {
  EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << input << ": " << e.what();
}

TEST(FuzzRegression, SafetensorsInputs) {
  const auto files = inputs("safetensors_fuzz");
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) {
    try {
      const auto st = weights::SafetensorsFile::open(f);
      for (const auto& [name, t] : st.tensors())
        EXPECT_LE(t.bytes.size(), st.file_size() - st.data_offset()) << f << ": " << name;
    } catch (const weights::WeightsError& e) {
      expect_one_line(e, f);
    }
  }
}

TEST(FuzzRegression, IrInputs) {
  const auto files = inputs("ir_fuzz");
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) {
    try {
      ir::verify(ir::load(f));
    } catch (const std::runtime_error& e) {
      expect_one_line(e, f);
    }
  }
}

TEST(FuzzRegression, TokenizerInputs) {
  const auto files = inputs("tokenizer_fuzz");
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) {
    const std::string in = read_bytes(f);
    const size_t nul = in.find('\0');
    const std::string json = in.substr(0, nul), text = nul == std::string::npos ? "" : in.substr(nul + 1);
    try {
      const auto tok = tokenizer::Tokenizer::from_json(json, f.string());
      try {
        (void)tok.decode(tok.encode(text, true), false);
      } catch (const std::runtime_error& e) {
        expect_one_line(e, f);  // text that is not UTF-8
      }
    } catch (const std::runtime_error& e) {
      expect_one_line(e, f);
    }
  }
}

TEST(FuzzRegression, GgufInputs) {
  const auto files = inputs("gguf_fuzz");
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) {
    try {
      const auto g = weights::GgufFile::open(f);
      for (const auto& t : g.tensors()) {
        EXPECT_GE(t.file_offset, g.data_offset()) << f << ": " << t.name;
        EXPECT_LE(t.file_offset + t.bytes.size(), g.file_size()) << f << ": " << t.name;
      }
    } catch (const weights::WeightsError& e) {
      expect_one_line(e, f);
    }
  }
}

// The input up to its first NUL is the template, the rest the JSON context (template_fuzz.cc).
TEST(FuzzRegression, TemplateInputs) {
  const auto files = inputs("template_fuzz");
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) {
    const std::string in = read_bytes(f);
    const size_t nul = in.find('\0');
    ASSERT_NE(nul, std::string::npos) << f;
    const auto context = base::parse_json_limited_as<nlohmann::ordered_json>(in.substr(nul + 1), 64);
    try {
      (void)tmpl::render(in.substr(0, nul), context);
    } catch (const tmpl::TemplateError&) {
      // raise_exception and errors of the template: the contract is only that nothing else escapes
    }
  }
}

TEST(FuzzRegression, RequestInputs) {
  const auto files = inputs("request_fuzz");
  ASSERT_FALSE(files.empty());
  const server::RequestLimits limits;
  for (const auto& f : files) {
    try {
      const auto body = server::parse_request_body(read_bytes(f), limits);
      for (bool chat : {false, true}) {
        try {
          EXPECT_GE(server::read_common(body, chat, 1).request.max_tokens, 1) << f;
        } catch (const server::ApiError& e) {
          EXPECT_EQ(e.status, 400) << f << ": " << e.what();
        }
      }
    } catch (const server::ApiError& e) {
      EXPECT_EQ(e.status, 400) << f << ": " << e.what();
    }
  }
}

// The request body limits themselves: depth refused while parsing, the message naming the limit.
TEST(FuzzRegression, RequestBodyDepthAndShape) {
  server::RequestLimits limits;
  limits.max_json_depth = 8;
  const std::string deep = "{\"prompt\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  try {
    (void)server::parse_request_body(deep, limits);
    ADD_FAILURE() << "a 100,000-deep body was accepted";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("deeper than 8 levels"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)server::parse_request_body_ordered(deep, limits), server::ApiError);
  EXPECT_THROW((void)server::parse_request_body("[1]", limits), server::ApiError);
  EXPECT_THROW((void)server::parse_request_body("{\"a\": ", limits), server::ApiError);
  EXPECT_EQ(server::parse_request_body(R"({"a": [[[1]]]})", limits)["a"][0][0][0], 1);
  // request_fuzz found: a number past double's range is nlohmann's out_of_range, not a
  // parse_error; it escaped as a 500 (fuzz/regressions/request_fuzz/).
  try {
    (void)server::parse_request_body(R"({"prompt": "x", "temperature": 1e400})", limits);
    ADD_FAILURE() << "1e400 was accepted";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  limits.max_tokens = 64;
  EXPECT_EQ(server::check_max_tokens(limits, false, 16, 1000), 64);
  EXPECT_EQ(server::check_max_tokens(limits, true, 64, 1000), 64);
  EXPECT_THROW(server::check_max_tokens(limits, true, 65, 1000), server::ApiError);
}

// The same overflow in a tokenizer.json: a one-line runtime_error naming the file.
TEST(FuzzRegression, TokenizerNumberOverflowNamesTheFile) {
  try {
    (void)tokenizer::Tokenizer::from_json(R"({"model": {"type": "BPE", "dropout": 1e400}})", "big/tokenizer.json");
    ADD_FAILURE() << "1e400 was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("big/tokenizer.json"), std::string::npos) << e.what();
  }
}

// template_fuzz found: a template defining a macro leaked every value of its render (the macro
// held its scope, the scope the macro). LeakSanitizer fails this under scripts/test.sh
// --sanitize; here, a value of the context must be freed once render returns.
TEST(FuzzRegression, MacroDoesNotKeepItsRenderAlive) {
  const std::string src = "{% macro r(x, n=2) %}{{ x }}{% if n > 0 %}{{ r(x, n - 1) }}{% endif %}{% endmacro %}"
                          "{{ r(messages[0].content) }}";
  nlohmann::json ctx = {{"messages", {{{"role", "user"}, {"content", "ab"}}}}};
  EXPECT_EQ(tmpl::render(src, ctx), "ababab");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tmpl::render(src, ctx), "ababab");
}

// agent_fuzz found: generated text that is not UTF-8 inside a tool call's parameter made the
// parser's JSON dump throw (a 500 mid-stream); it is written as U+FFFD now
// (fuzz/regressions/agent_fuzz/).
TEST(FuzzRegression, ToolCallParameterThatIsNotUtf8) {
  tmpl::ToolFormat f;
  f.supported = true;
  f.kind = tmpl::ToolFormat::Kind::name_then_params;
  f.call_open = "<tool_call>\n<function=", f.mid = ">\n", f.call_close = "</function>\n</tool_call>";
  f.param_open = "<parameter=", f.param_mid = ">\n", f.param_close = "\n</parameter>\n";
  const auto raw = read_bytes(fs::path(FUSELM_SOURCE_DIR) / "fuzz/regressions/agent_fuzz/invalid_utf8_in_a_parameter");
  for (const std::string& text : {raw.substr(1), std::string("<tool_call>\n<function=f>\n<parameter=a>\nh\xe8\n</parameter>\n</function>\n</tool_call>")}) {
    server::ChatOutputParser p(&f, nlohmann::json::array(), {}, false);
    EXPECT_NO_THROW(p.feed(text));
    EXPECT_NO_THROW(p.finish());
  }
  server::ChatOutputParser p(&f, nlohmann::json::array(), {}, false);
  p.feed("<tool_call>\n<function=f>\n<parameter=a>\nh\xe8\n</parameter>\n</function>\n</tool_call>");
  p.finish();
  ASSERT_EQ(p.calls().size(), 1u);
  EXPECT_EQ(p.calls()[0].arguments, "{\"a\":\"h\xef\xbf\xbd\"}");
}

}  // namespace fuzz_regression_test
}  // namespace fuselm
