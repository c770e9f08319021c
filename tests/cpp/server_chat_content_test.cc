// join_text_parts: a chat message's content given as a list of parts.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/chat_content.h"

namespace fuselm::server {
namespace server_chat_content_test {

using nlohmann::ordered_json;

std::string message_of(ordered_json body) {
  try {
    join_text_parts(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "messages");
    return e.what();
  }
  return "";
}

TEST(ChatContent, TextPartsAreJoinedByNewlines) {
  auto body = ordered_json::parse(R"({"messages": [{"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null}]})");
  join_text_parts(body);
  EXPECT_EQ(body["messages"][0]["content"], "s");
  EXPECT_EQ(body["messages"][1]["content"], "a\nb");
  EXPECT_TRUE(body["messages"][2]["content"].is_null());
}

TEST(ChatContent, NonTextPartsAreRefusedByName) {
  const auto image = message_of(ordered_json::parse(R"({"messages": [{"role": "user", "content": "x"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}]}]})"));
  EXPECT_NE(image.find("messages[1].content[1] has type 'image_url'"), std::string::npos) << image;
  EXPECT_NE(image.find("image input is not supported yet"), std::string::npos) << image;
  const auto audio = message_of(ordered_json::parse(R"({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})"));
  EXPECT_NE(audio.find("audio input is not supported yet"), std::string::npos) << audio;
  const auto other = message_of(ordered_json::parse(R"({"messages": [{"role": "user", "content": [{"type": "file"}]}]})"));
  EXPECT_NE(other.find("only 'text' parts are supported"), std::string::npos) << other;
}

TEST(ChatContent, MalformedPartsAreRefused) {
  const auto no_type = message_of(ordered_json::parse(R"({"messages": [{"role": "user", "content": [3]}]})"));
  EXPECT_NE(no_type.find("must be an object with a string 'type'"), std::string::npos) << no_type;
  const auto no_text =
      message_of(ordered_json::parse(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})"));
  EXPECT_NE(no_text.find("must have a string 'text'"), std::string::npos) << no_text;
}

}  // namespace server_chat_content_test
}  // namespace fuselm::server
