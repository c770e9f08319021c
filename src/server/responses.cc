#include "server/responses.h"

#include <atomic>
#include <ctime>

namespace fuselm::server {
namespace {
using ojson = nlohmann::ordered_json;

std::atomic<uint64_t> g_next_id{1};

ojson bytes_of(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}
}  // namespace

ojson finish_reason_json(engine::FinishReason reason) { return engine::openai_name(reason); }

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

ojson ResponseBuilder::logprobs_json(const std::vector<engine::TokenOut>& tokens, bool first_null) const {
  if (!logprobs_) return nullptr;
  if (chat_) {
    ojson content = ojson::array();
    for (const auto& t : tokens) {
      const std::string s = token_text(t.id);
      ojson top = ojson::array();
      for (const auto& [id, lp] : t.top) {
        const std::string ts = token_text(id);
        top.push_back({{"token", ts}, {"logprob", lp}, {"bytes", bytes_of(ts)}});
      }
      content.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", bytes_of(s)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  ojson toks = ojson::array(), lps = ojson::array(), tops = ojson::array(), offs = ojson::array();
  size_t text_offset = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto& t = tokens[i];
    const std::string s = token_text(t.id);
    toks.push_back(s);
    const bool null = first_null && i == 0;
    lps.push_back(null ? ojson(nullptr) : ojson(t.logprob));
    ojson top = ojson::object();  // best first: ordered_json keeps insertion order
    for (const auto& [id, lp] : t.top) top[token_text(id)] = lp;
    tops.push_back(null ? ojson(nullptr) : top);
    offs.push_back(text_offset);
    text_offset += s.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

ojson ResponseBuilder::envelope(bool stream) const {
  const char* object = chat_ ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

ojson ResponseBuilder::usage(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

ojson ResponseBuilder::chunk(int64_t index, const ojson& fields, const std::vector<engine::TokenOut>& tokens,
                             const ojson& finish_reason, bool first_logprob_null) const {
  ojson j = envelope(true);
  ojson choice = {{"index", index}, {"finish_reason", finish_reason}, {"logprobs", logprobs_json(tokens, first_logprob_null)}};
  if (chat_) {
    choice["delta"] = fields.empty() && finish_reason.is_null() ? ojson{{"content", ""}} : fields;
    if (choice["delta"].is_null()) choice["delta"] = ojson::object();
  } else {
    choice["text"] = fields.value("text", std::string());
  }
  j["choices"] = ojson::array({choice});
  return j;
}

ojson ResponseBuilder::role_chunk(int64_t index) const {
  ojson j = envelope(true);
  j["choices"] = ojson::array(
      {{{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  return j;
}

ojson ResponseBuilder::usage_chunk(const Usage& u) const {
  ojson j = envelope(true);
  j["choices"] = ojson::array();
  j["usage"] = usage(u);
  return j;
}

ojson ResponseBuilder::full(const std::vector<ChoiceResult>& choices, const Usage& u) const {
  ojson j = envelope(false);
  ojson list = ojson::array();
  for (const auto& c : choices) {
    ojson choice = {{"index", c.index}, {"finish_reason", c.finish_reason}, {"logprobs", logprobs_json(c.tokens, c.first_logprob_null)}};
    if (chat_) {
      ojson message = {{"role", "assistant"}};
      for (const auto& [k, v] : c.fields.items()) message[k] = v;
      choice["message"] = message;
    } else {
      choice["text"] = c.fields.value("text", std::string());
    }
    list.push_back(choice);
  }
  j["choices"] = list;
  j["usage"] = usage(u);
  return j;
}

}  // namespace fuselm::server
