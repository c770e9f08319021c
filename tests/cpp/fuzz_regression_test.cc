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

#include "ir/load.h"
#include "tokenizer/tokenizer.h"
#include "weights/error.h"
#include "weights/safetensors.h"

#ifndef FUSELM_SOURCE_DIR
#define FUSELM_SOURCE_DIR "."
#endif

namespace fuselm {
namespace {
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

}  // namespace
}  // namespace fuselm
