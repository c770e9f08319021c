#include "server/embeddings.h"

#include <fmt/core.h>
#include <httplib.h>

#include <bit>
#include <cstring>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/request_fields.h"

namespace fuselm::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

// OpenAI takes at most 2048 inputs per request.
constexpr size_t kMaxInputs = 2048;

std::vector<int64_t> ids_of(const json& list) {
  std::vector<int64_t> ids;
  for (const auto& x : list) {
    if (!x.is_number_integer()) throw ApiError(400, "'input' token ids must be integers", "input");
    ids.push_back(x.get<int64_t>());
  }
  return ids;
}

std::vector<int64_t> encode(const EmbeddingsContext& ctx, const json& text) {
  if (!ctx.tokenizer) throw ApiError(400, "a text input needs the model's tokenizer.json; send token ids", "input");
  const auto ids = ctx.tokenizer->encode(text.get<std::string>());
  return {ids.begin(), ids.end()};
}

// The inputs as token ids, in order.
std::vector<std::vector<int64_t>> read_inputs(const EmbeddingsContext& ctx, const json& body) {
  auto it = body.find("input");
  if (it == body.end() || it->is_null()) throw ApiError(400, "'input' is required", "input");
  const json& in = *it;
  if (in.is_string()) return {encode(ctx, in)};
  if (!in.is_array() || in.empty())
    throw ApiError(400, "'input' must be a string, a list of strings, a list of token ids or a list of those lists", "input");
  if (in[0].is_number_integer()) return {ids_of(in)};
  if (in.size() > kMaxInputs) throw ApiError(400, fmt::format("'input' holds {} inputs; at most {}", in.size(), kMaxInputs), "input");
  std::vector<std::vector<int64_t>> out;
  for (const auto& x : in) {
    if (x.is_string()) out.push_back(encode(ctx, x));
    else if (x.is_array()) out.push_back(ids_of(x));
    else throw ApiError(400, "'input' list items must all be strings or all token-id lists", "input");
  }
  return out;
}

ojson vector_json(const std::vector<float>& v, bool base64) {
  if (base64) {
    static_assert(std::endian::native == std::endian::little, "base64 embeddings are little-endian f32");
    return base64_encode({reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)});
  }
  ojson a = ojson::array();
  for (float x : v) a.push_back(x);
  return a;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

void serve_embeddings(const EmbeddingsContext& ctx, const httplib::Request& hreq, httplib::Response& res) {
  const Deadline deadline(ctx.limits);
  const json body = parse_request_body(hreq.body, ctx.limits);
  if (auto m = get_string(body, "model"); m && *m != ctx.model_name)
    throw ApiError(404, fmt::format("the model '{}' does not exist (this server has '{}')", *m, ctx.model_name), "model");
  const std::string format = get_string(body, "encoding_format").value_or("float");
  if (format != "float" && format != "base64")
    throw ApiError(400, fmt::format("'encoding_format' must be \"float\" or \"base64\", got \"{}\"", format.substr(0, 32)),
                   "encoding_format");
  const int64_t width = ctx.engine.hidden_size();
  if (width <= 0) throw ApiError(400, "this model cannot give embeddings: its graph does not expose its final hidden states", "input");
  if (auto d = get_int(body, "dimensions", 1, int64_t{1} << 40); d && *d != width)
    throw ApiError(400, fmt::format("'dimensions' must be the model's width {} (fuselm does not shorten embeddings), got {}", width, *d),
                   "dimensions");
  // vLLM's extension: "normalize": false gives the pooled vector as it is.
  const bool normalize = get_bool(body, "normalize").value_or(ctx.config.normalize);
  std::vector<engine::Request> reqs;
  int64_t tokens = 0;
  for (auto& ids : read_inputs(ctx, body)) {
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n == 0) throw ApiError(400, "an 'input' is empty", "input");
    if (n >= ctx.max_context)
      throw ApiError(400, fmt::format("an input has {} tokens but the model's context is {} tokens", n, ctx.max_context), "input");
    tokens += n;
    engine::Request r;
    r.prompt_ids = std::move(ids);
    r.max_tokens = 1;
    r.embed = ctx.config.pooling;
    r.normalize = normalize;
    reqs.push_back(std::move(r));
  }
  Generation g;
  for (auto& s : ctx.engine.submit_group(std::move(reqs), g.waker)) {
    Choice c;
    c.index = static_cast<int64_t>(g.choices.size());
    c.stream = std::move(s);
    g.choices.push_back(std::move(c));
  }
  std::vector<std::vector<float>> vectors(g.choices.size());
  std::string error;
  const bool done = collect(g, deadline, hreq, [&](Choice& c, engine::Event& e) {
    if (!e.embedding.empty()) vectors[static_cast<size_t>(c.index)] = std::move(e.embedding);
    if (e.finished && e.finish_reason == engine::FinishReason::error) error = e.error;
  });
  if (!done) return;
  if (!error.empty()) throw ApiError(500, "embedding failed: " + error);
  for (const auto& v : vectors)
    if (v.empty()) throw ApiError(503, "the embedding was aborted (the server is shutting down)");
  ojson data = ojson::array();
  for (size_t i = 0; i < vectors.size(); ++i)
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", vector_json(vectors[i], format == "base64")}});
  const ojson out = {{"object", "list"}, {"data", data}, {"model", ctx.model_name},
                     {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  res.set_content(out.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
}

}  // namespace fuselm::server
