#pragma once
// Chat messages whose content is a list of parts, as OpenAI clients send them
// ([{"type": "text", "text": "..."}, {"type": "image_url", ...}]). The engine runs a model's text
// part only, so text parts become one string and any other part is refused by name.
#include <nlohmann/json.hpp>

namespace fuselm::server {

/// Rewrites each message of body["messages"] whose "content" is an array into the string of its
/// text parts joined by "\n" (vLLM's form for templates that take string content). A part that is
/// not {"type": "text", "text": string} is an ApiError 400 naming the message, the part and its
/// type (image_url and input_audio: that image or audio input is not supported yet). Messages
/// whose content is a string or null, and bodies without a messages array, are left as they are.
void join_text_parts(nlohmann::ordered_json& body);

}  // namespace fuselm::server
