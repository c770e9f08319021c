// The per-token cost of constrained decoding on a real vocabulary: a realistic JSON Schema (an
// order: a patterned id, a customer object with an email format, an array of 40 line items with
// bounded integers, numbers, enum tags, a status enum, a nullable note) compiled for a model's
// tokenizer as `fuselm serve` compiles it, then a generated valid document of that schema,
// tokenized by the same tokenizer, walked token by token: each step fills the bitmask (what the
// engine does before sampling a constrained row), applies it to a logits row (the sampler's
// apply_mask, as a Matcher::mask_logits), and accepts the token. Prints the median, p99 and mean
// microseconds of the fill, the fill plus the logits pass, and the accept, one thread.
//   build/bench_grammar_mask [MODEL_DIR]     (default: models/SmolLM2-135M-Instruct, from the repo root)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace {

using clk = std::chrono::steady_clock;
namespace g = fuselm::grammar;

const char* kSchema = R"({"type": "object", "properties": {
  "id": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{6}$"},
  "customer": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
    "email": {"type": "string", "format": "email"}, "vip": {"type": "boolean"}}, "required": ["name", "email"]},
  "items": {"type": "array", "minItems": 1, "maxItems": 100, "items": {"type": "object", "properties": {
    "sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
    "price": {"type": "number", "minimum": 0}, "tags": {"type": "array", "items": {"enum": ["new", "sale", "gift"]}}},
    "required": ["sku", "quantity", "price"]}},
  "status": {"enum": ["pending", "shipped", "delivered"]},
  "notes": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
  "required": ["id", "customer", "items", "status"]})";

/// A valid document, written as the grammar writes JSON (", " and ": ", properties in order).
std::string document() {
  std::string d = R"({"id": "AB123456", "customer": {"name": "Ada Lovelace", "email": "ada@example.com", "vip": true}, "items": [)";
  const char* tags[] = {"new", "sale", "gift"};
  for (int i = 0; i < 40; ++i) {
    if (i) d += ", ";
    d += R"({"sku": "SKU-)" + std::to_string(1000 + i * 7) + R"(", "quantity": )" + std::to_string(1 + i % 9) +
         R"(, "price": )" + std::to_string(3 + i) + "." + std::to_string(10 + i) + R"(, "tags": [")" + tags[i % 3] + R"("]})";
  }
  return d + R"(], "status": "shipped", "notes": "Leave the parcel at the door, please."})";
}

struct Stats {
  std::vector<double> us;
  void print(const char* what) {
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double x : us) sum += x;
    std::printf("%-28s median %7.1f us   p99 %7.1f us   mean %7.1f us   (%zu tokens)\n", what, us[us.size() / 2],
                us[std::min(us.size() - 1, us.size() * 99 / 100)], sum / static_cast<double>(us.size()), us.size());
  }
};

double since(clk::time_point t) { return std::chrono::duration<double, std::micro>(clk::now() - t).count(); }

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct";  // run from the repository root
  auto tok = fuselm::tokenizer::Tokenizer::from_file(dir);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  g::Vocabulary v;
  for (uint32_t id = 0; id < tok.vocab_size(); ++id) v.token_bytes.push_back(tok.token_bytes(id));
  v.size = std::max<int32_t>(static_cast<int32_t>(tok.vocab_size()), config.value("vocab_size", 0));
  const auto eos = config.value("eos_token_id", nlohmann::json(0));
  for (const auto& e : eos.is_array() ? eos : nlohmann::json::array({eos})) v.stop_ids.push_back(e.get<int32_t>());

  auto t0 = clk::now();
  g::Compiler compiler(v);
  const double setup_ms = since(t0) / 1e3;
  t0 = clk::now();
  auto compiled = compiler.compile(g::Grammar::json_schema(nlohmann::ordered_json::parse(kSchema), true));
  const double compile_ms = since(t0) / 1e3;
  const std::string doc = document();
  const auto ids = tok.encode(doc, false);
  std::printf("vocabulary %d tokens; compiler setup %.0f ms; schema compile %.0f ms; document %zu bytes, %zu tokens\n",
              v.size, setup_ms, compile_ms, doc.size(), ids.size());

  Stats fill, fill_apply, accept;
  std::vector<int32_t> mask(static_cast<size_t>(g::bitmask_words(v.size))), scratch;
  std::vector<float> logits(static_cast<size_t>(v.size), 0.5f);
  for (int rep = 0; rep < 3; ++rep) {
    g::Matcher m(compiled), m2(compiled);
    for (uint32_t id : ids) {
      auto t = clk::now();
      m.fill_bitmask(mask);
      fill.us.push_back(since(t));
      t = clk::now();
      m2.mask_logits(logits, scratch);
      fill_apply.us.push_back(since(t));
      if (!((static_cast<uint32_t>(mask[id / 32]) >> (id % 32)) & 1u)) {
        std::fprintf(stderr, "the mask refused token %u of the document\n", id);
        return 1;
      }
      t = clk::now();
      m.accept(static_cast<int32_t>(id));
      accept.us.push_back(since(t));
      m2.accept(static_cast<int32_t>(id));
    }
    if (!m.completed()) {
      std::fprintf(stderr, "the document did not complete the grammar\n");
      return 1;
    }
  }
  fill.print("fill bitmask");
  fill_apply.print("fill + apply to logits");
  accept.print("accept token");
  return 0;
}
