#include "server/chat_content.h"

#include <fmt/core.h>

#include <string>

#include "server/api_error.h"

namespace fuselm::server {
namespace {

/// Why a part of `type` cannot be taken, for the error message.
std::string unsupported_reason(const std::string& type) {
  if (type == "image_url" || type == "image") return "image input is not supported yet";
  if (type == "input_audio" || type == "audio_url") return "audio input is not supported yet";
  return "only 'text' parts are supported";
}

/// The part's type as the message shows it: the client's string, cut short (it is echoed back).
std::string shown_type(const nlohmann::ordered_json& part) {
  if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) return "";
  std::string t = part["type"].get<std::string>();
  if (t.size() > 40) t = t.substr(0, 40) + "...";
  return t;
}

std::string joined_text(const nlohmann::ordered_json& parts, size_t message) {
  std::string text;
  for (size_t j = 0; j < parts.size(); ++j) {
    const auto& part = parts[j];
    const std::string where = fmt::format("messages[{}].content[{}]", message, j);
    const std::string type = shown_type(part);
    if (type.empty()) throw ApiError(400, where + " must be an object with a string 'type'", "messages");
    if (type != "text")
      throw ApiError(400, fmt::format("{} has type '{}': {}; this server runs the model on text only",
                                      where, type, unsupported_reason(type)), "messages");
    if (!part.contains("text") || !part["text"].is_string())
      throw ApiError(400, where + " of type 'text' must have a string 'text'", "messages");
    if (j) text += '\n';
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

void join_text_parts(nlohmann::ordered_json& body) {
  if (!body.is_object() || !body.contains("messages") || !body["messages"].is_array()) return;
  auto& messages = body["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    auto& m = messages[i];
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    m["content"] = joined_text(m["content"], i);
  }
}

}  // namespace fuselm::server
