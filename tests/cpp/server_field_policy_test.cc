// field_policy: the table of top-level request fields (read, harmless, unsupported, unknown), the
// 400 naming an unsupported field, its neutral value accepted, and the once-per-name log.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/field_policy.h"

namespace fuselm::server {
namespace server_field_policy_test {

using nlohmann::json;

struct Logged {
  std::vector<std::string> lines;
  UnknownFieldLog log{[this](const std::string& l) { lines.push_back(l); }, 3};
};

// The ApiError's param for `body` at `ep` ("" when accepted).
std::string refused(const json& body, Endpoint ep = Endpoint::chat) {
  Logged l;
  try {
    check_fields(body, ep, l.log);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("'" + e.param + "'"), std::string::npos) << e.what();
    return e.param;
  }
  return "";
}

TEST(FieldPolicy, ReaderFieldsPerEndpoint) {
  for (const char* f : {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
                        "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "stop", "stop_token_ids",
                        "ignore_eos", "logprobs", "top_logprobs", "stream", "stream_options", "n", "best_of", "echo",
                        "logit_bias", "response_format", "guided_json", "guided_regex", "guided_grammar",
                        "guided_choice", "structured_outputs", "grammar", "json_schema", "tools", "tool_choice",
                        "chat_template_kwargs", "enable_thinking"})
    EXPECT_EQ(classify_field(Endpoint::chat, f), FieldKind::read) << f;
  EXPECT_EQ(classify_field(Endpoint::completions, "prompt"), FieldKind::read);
  EXPECT_EQ(classify_field(Endpoint::completions, "suffix"), FieldKind::read);
  EXPECT_EQ(classify_field(Endpoint::completions, "messages"), FieldKind::unknown);  // read by chat only
  for (const char* f : {"input", "instructions", "max_output_tokens", "text", "previous_response_id", "store", "tools"})
    EXPECT_EQ(classify_field(Endpoint::responses, f), FieldKind::read) << f;
  for (const char* f : {"input", "encoding_format", "dimensions"})
    EXPECT_EQ(classify_field(Endpoint::embeddings, f), FieldKind::read) << f;
  EXPECT_EQ(classify_field(Endpoint::embeddings, "temperature"), FieldKind::unknown);
}

TEST(FieldPolicy, HarmlessFieldsAreAccepted) {
  for (const char* f : {"user", "metadata", "store", "service_tier", "prompt_cache_key", "cache_prompt", "priority"})
    EXPECT_EQ(classify_field(Endpoint::chat, f), FieldKind::harmless) << f;
  EXPECT_EQ(refused({{"user", "u"}, {"metadata", {{"a", "b"}}}, {"store", true}}), "");
}

TEST(FieldPolicy, OutputChangingFieldsAre400sNamingThem) {
  for (const char* f : {"use_beam_search", "length_penalty", "truncate_prompt_tokens", "typical_p", "tfs_z", "mirostat",
                        "dry_multiplier", "xtc_probability", "n_probs", "n_predict", "repeat_penalty", "samplers",
                        "reasoning_effort", "functions"})
    EXPECT_EQ(classify_field(Endpoint::chat, f), FieldKind::unsupported) << f;
  EXPECT_EQ(refused({{"model", "m"}, {"use_beam_search", true}}), "use_beam_search");
  EXPECT_EQ(refused({{"typical_p", 0.5}}), "typical_p");
  EXPECT_EQ(refused({{"mirostat", 2}}, Endpoint::completions), "mirostat");
  EXPECT_EQ(refused({{"truncate_prompt_tokens", 10}}, Endpoint::embeddings), "truncate_prompt_tokens");
  EXPECT_EQ(refused({{"n_predict", 5}}, Endpoint::completions), "n_predict");
  EXPECT_EQ(refused({{"modalities", {"text", "audio"}}}), "modalities");
  // No reader takes these yet: their non-default values are refused, the defaults accepted.
  EXPECT_EQ(refused({{"min_tokens", 5}}, Endpoint::completions), "");  // read by the sampler (min_tokens)
  EXPECT_EQ(refused({{"parallel_tool_calls", false}}, Endpoint::responses), "parallel_tool_calls");
  EXPECT_EQ(refused({{"add_generation_prompt", false}}), "add_generation_prompt");
  EXPECT_EQ(refused({{"min_tokens", 0}, {"parallel_tool_calls", true}, {"add_generation_prompt", true}}), "");
}

TEST(FieldPolicy, NeutralValuesAndNullAreAccepted) {
  EXPECT_EQ(refused({{"typical_p", 1}, {"tfs_z", 1.0}, {"mirostat", 0}, {"use_beam_search", false},
                     {"length_penalty", 1.0}, {"skip_special_tokens", true}, {"modalities", {"text"}},
                     {"truncate_prompt_tokens", nullptr}, {"n_probs", 0}}),
            "");
  // A sampler's parameters are harmless while its switch is off; the switch is what is checked.
  EXPECT_EQ(refused({{"mirostat", 0}, {"mirostat_tau", 5.0}, {"dry_base", 1.75}}), "");
}

TEST(FieldPolicy, UnknownFieldsAreLoggedOncePerNameAndBounded) {
  Logged l;
  check_fields({{"foo", 1}, {"model", "m"}}, Endpoint::chat, l.log);
  check_fields({{"foo", 2}}, Endpoint::chat, l.log);
  ASSERT_EQ(l.lines.size(), 1u);
  EXPECT_NE(l.lines[0].find("\"foo\""), std::string::npos);
  EXPECT_NE(l.lines[0].find("/v1/chat/completions"), std::string::npos);
  check_fields({{"a\nfake log line", 1}, {"b", 1}, {"c", 1}, {"d", 1}}, Endpoint::chat, l.log);
  // max 3 names: foo, "a\n...", b, then one line saying the log stopped, and nothing after.
  ASSERT_EQ(l.lines.size(), 4u);
  EXPECT_EQ(l.lines[1].find('\n'), std::string::npos);  // quoted: a name cannot forge a line
  EXPECT_NE(l.lines[3].find("further ones"), std::string::npos);
}

TEST(FieldPolicy, NonObjectBodiesAreLeftToTheReader) {
  Logged l;
  EXPECT_NO_THROW(check_fields(json::array({1, 2}), Endpoint::chat, l.log));
  EXPECT_TRUE(l.lines.empty());
}

}  // namespace server_field_policy_test
}  // namespace fuselm::server
