// find_model_template: where transformers finds a model's chat template, and its bos/eos tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "template/chat_template.h"

namespace fuselm::tmpl {
namespace template_model_test {
namespace fs = std::filesystem;

class ModelTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fuselm_tmpl_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  fs::path dir_;
};

TEST_F(ModelTemplateTest, NoneWhenTheModelHasNoTemplate) {
  write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(find_model_template(dir_).has_value());
}

TEST_F(ModelTemplateTest, StringTemplateAndTokensAsStringOrContent) {
  write("tokenizer_config.json", R"({"chat_template": "T", "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})");
  auto t = find_model_template(dir_);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->source, "T");
  EXPECT_EQ(t->bos_token, "<s>");
  EXPECT_EQ(t->eos_token, "</s>");
}

TEST_F(ModelTemplateTest, ChatTemplateJinjaWins) {
  write("tokenizer_config.json", R"({"chat_template": "from config"})");
  write("chat_template.jinja", "from file");
  EXPECT_EQ(find_model_template(dir_)->source, "from file");
}

TEST_F(ModelTemplateTest, NamedTemplatesPickedAsTransformersDoes) {
  write("tokenizer_config.json",
        R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "U"},
                               {"name": "rag", "template": "R"}]})");
  EXPECT_EQ(find_model_template(dir_)->source, "D");
  EXPECT_EQ(find_model_template(dir_, "", true)->source, "U");  // tools given: tool_use first
  EXPECT_EQ(find_model_template(dir_, "rag")->source, "R");
  EXPECT_THROW(find_model_template(dir_, "nope"), std::runtime_error);
}

TEST_F(ModelTemplateTest, BadFileNamesTheFile) {
  write("tokenizer_config.json", "{not json");
  try {
    find_model_template(dir_);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos);
  }
}

TEST_F(ModelTemplateTest, DefaultModelTemplateRenders) {
  fs::path model = fs::path(FUSELM_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct";
  if (!fs::exists(model / "tokenizer_config.json")) GTEST_SKIP() << "default model not prepared";
  auto t = find_model_template(model);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->eos_token, "<|im_end|>");
  nlohmann::ordered_json vars = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"add_generation_prompt", true}};
  // transformers' apply_chat_template(tokenize=False) of the same conversation.
  EXPECT_EQ(render(t->source, vars),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace template_model_test
}  // namespace fuselm::tmpl
