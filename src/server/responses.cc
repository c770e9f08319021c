#include "server/responses.h"

#include <atomic>
#include <ctime>

namespace fuselm::server {
namespace {
std::atomic<uint64_t> g_next_id{1};

nlohmann::json bytes_of(const std::string& s) {
  nlohmann::json b = nlohmann::json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}
}  // namespace

nlohmann::json finish_reason_json(engine::FinishReason reason) { return engine::openai_name(reason); }

ResponseBuilder::ResponseBuilder(bool chat, std::string model, const tokenizer::Tokenizer* tok, bool logprobs)
    : chat_(chat),
      model_(std::move(model)),
      id_((chat ? "chatcmpl-" : "cmpl-") + std::to_string(g_next_id++)),
      created_(static_cast<int64_t>(std::time(nullptr))),
      tok_(tok),
      logprobs_(logprobs) {}

std::string ResponseBuilder::token_text(int64_t id) const {
  if (!tok_) return std::to_string(id);
  const uint32_t u = static_cast<uint32_t>(id);
  return tok_->decode({&u, 1}, false);
}

nlohmann::json ResponseBuilder::logprobs_json(const std::vector<engine::TokenOut>& tokens, size_t text_offset) const {
  if (!logprobs_) return nullptr;
  if (chat_) {
    nlohmann::json content = nlohmann::json::array();
    for (const auto& t : tokens) {
      const std::string s = token_text(t.id);
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string ts = token_text(id);
        top.push_back({{"token", ts}, {"logprob", lp}, {"bytes", bytes_of(ts)}});
      }
      content.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", bytes_of(s)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  nlohmann::json toks = nlohmann::json::array(), lps = nlohmann::json::array(), tops = nlohmann::json::array(),
                 offs = nlohmann::json::array();
  for (const auto& t : tokens) {
    const std::string s = token_text(t.id);
    toks.push_back(s);
    lps.push_back(t.logprob);
    nlohmann::json top = nlohmann::json::object();
    for (const auto& [id, lp] : t.top) top[token_text(id)] = lp;
    tops.push_back(top);
    offs.push_back(text_offset);
    text_offset += s.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

nlohmann::json ResponseBuilder::envelope(bool stream) const {
  const char* object = chat_ ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

nlohmann::json ResponseBuilder::usage(const engine::Event& last) {
  return {{"prompt_tokens", last.prompt_tokens},
          {"completion_tokens", last.completion_tokens},
          {"total_tokens", last.prompt_tokens + last.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", last.cached_tokens}}}};
}

nlohmann::json ResponseBuilder::chunk(const std::string& text, const std::vector<engine::TokenOut>& tokens,
                                      const nlohmann::json& finish_reason) const {
  nlohmann::json j = envelope(true);
  nlohmann::json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", logprobs_json(tokens, 0)}};
  if (chat_) choice["delta"] = text.empty() && !finish_reason.is_null() ? nlohmann::json::object() : nlohmann::json{{"content", text}};
  else choice["text"] = text;
  j["choices"] = nlohmann::json::array({choice});
  return j;
}

nlohmann::json ResponseBuilder::role_chunk() const {
  nlohmann::json j = envelope(true);
  j["choices"] = nlohmann::json::array(
      {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  return j;
}

nlohmann::json ResponseBuilder::usage_chunk(const engine::Event& last) const {
  nlohmann::json j = envelope(true);
  j["choices"] = nlohmann::json::array();
  j["usage"] = usage(last);
  return j;
}

nlohmann::json ResponseBuilder::full(const std::string& text, const std::vector<engine::TokenOut>& tokens,
                                     const engine::Event& last) const {
  nlohmann::json j = envelope(false);
  nlohmann::json choice = {{"index", 0}, {"finish_reason", finish_reason_json(last.finish_reason)},
                           {"logprobs", logprobs_json(tokens, 0)}};
  if (chat_) choice["message"] = {{"role", "assistant"}, {"content", text}};
  else choice["text"] = text;
  j["choices"] = nlohmann::json::array({choice});
  j["usage"] = usage(last);
  return j;
}

}  // namespace fuselm::server
