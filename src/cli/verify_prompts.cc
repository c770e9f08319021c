#include "cli/verify_prompts.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "ir/op_defs.h"

namespace fuselm::cli {
namespace {

// Plain prose with names, numbers, a list and a little code: a mix of the token kinds a model
// meets, long enough for most windows before it repeats.
constexpr const char* kText =
    "The history of the printing press begins in the middle of the fifteenth century, when Johannes "
    "Gutenberg, a goldsmith from Mainz, combined movable metal type, oil-based ink and a wooden screw "
    "press adapted from those used to make wine. Before his invention, books were copied by hand, a slow "
    "and expensive process that kept written knowledge in the hands of monasteries, universities and "
    "wealthy patrons. Within fifty years, presses were working in more than two hundred cities, and "
    "perhaps twenty million volumes had been printed by 1500.\n\n"
    "A recipe for bread needs only four things: 500 g of flour, 350 ml of water, 10 g of salt and 7 g of "
    "dried yeast. Mix them, knead the dough for ten minutes, let it rise for an hour, shape it, let it "
    "rise again and bake it at 230 degrees Celsius for about 35 minutes, until the crust is brown and "
    "the loaf sounds hollow when tapped underneath.\n\n"
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "print([fibonacci(i) for i in range(10)])  # [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]\n\n"
    "Q: Why is the sky blue? A: Sunlight is scattered by the molecules of the air, and shorter "
    "wavelengths are scattered much more strongly than longer ones (Rayleigh scattering, which goes as "
    "the inverse fourth power of the wavelength), so blue light reaches our eyes from every part of the "
    "sky. At sunrise and sunset the light crosses far more air, most of the blue is scattered away "
    "before it arrives, and the sky near the sun turns orange and red.\n\n"
    "Travel notes, day three: we left Lyon at 7:40 on the regional train, changed at Grenoble, and "
    "reached Briançon a little after noon. The valley narrows after Vizille; the river runs grey-green "
    "with glacier water, and the villages cling to the slopes above it. Tomorrow we plan to walk to the "
    "fort of Les Salettes and, if the weather holds, on to the Croix de Toulouse, 1,962 metres up.\n\n"
    "In mathematics, a prime number is a natural number greater than 1 that is not a product of two "
    "smaller natural numbers. Euclid proved that there are infinitely many: given any finite list of "
    "primes, multiply them together and add one; the result is divisible by none of them, so some prime "
    "is missing from the list. The first few are 2, 3, 5, 7, 11, 13, 17, 19, 23 and 29.\n\n";

std::vector<int64_t> encode(const tokenizer::PromptTokenizer& tok, const std::string& text) {
  std::vector<int64_t> out;
  for (auto id : tok.encode(text, true)) out.push_back(id);
  return out;
}

// The fixed text's ids, the text repeated until there are at least n.
std::vector<int64_t> text_ids(const tokenizer::PromptTokenizer& tok, int64_t n) {
  std::string text = kText;
  std::vector<int64_t> ids = encode(tok, text);
  while (static_cast<int64_t>(ids.size()) < n) {
    text += kText;
    ids = encode(tok, text);
  }
  return ids;
}

// Ids from a 64-bit LCG (Knuth's MMIX constants): the same on every machine.
std::vector<int64_t> lcg_ids(int64_t n, int64_t vocab) {
  std::vector<int64_t> ids;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(vocab)));
  }
  return ids;
}

}  // namespace

int64_t attention_window(const ir::Graph& g) {
  int64_t widest = 0;
  for (const auto& n : g.nodes) {
    const ir::OpDef* def = ir::find_op_def(n.op);
    if (!def) continue;
    for (size_t i = 0; i < def->args.size() && i < n.args.size(); ++i)
      if ((def->args[i] == "sliding_window" || def->args[i] == "chunk_size") && n.args[i].kind == ir::Arg::Kind::integer)
        widest = std::max(widest, n.args[i].i);
  }
  return widest;
}

std::vector<VerifyPrompt> builtin_prompts(const tokenizer::PromptTokenizer* tok, int64_t vocab, int64_t window,
                                          int64_t max_prompt) {
  std::vector<std::pair<int64_t, std::string>> lengths = {{7, ""}, {64, ""}, {300, ""}};
  if (window > 0) lengths.push_back({window + 1, fmt::format(" (window {} + 1)", window)});
  int64_t longest = 0;
  for (auto& [n, why] : lengths) longest = std::max(longest, n = std::min(n, max_prompt));
  const std::vector<int64_t> all = tok ? text_ids(*tok, longest) : lcg_ids(longest, vocab);
  std::vector<VerifyPrompt> out;
  for (const auto& [n, why] : lengths) {
    if (!out.empty() && static_cast<int64_t>(out.back().ids.size()) >= n) continue;  // capped to one length
    out.push_back({fmt::format("{} tokens{}", n, why), {all.begin(), all.begin() + n}});
  }
  return out;
}

std::vector<VerifyPrompt> prompts_from_file(const std::string& path, const tokenizer::PromptTokenizer* tok, int64_t vocab,
                                            int64_t max_prompt) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--prompts " + path + ": cannot read");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception&) {
    throw std::runtime_error("--prompts " + path + ": not JSON; give an array of texts or of token-id arrays");
  }
  if (!j.is_array() || j.empty()) throw std::runtime_error("--prompts " + path + ": expected a non-empty JSON array");
  std::vector<VerifyPrompt> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string where = fmt::format("--prompts {} item {}", path, i + 1);
    VerifyPrompt p{fmt::format("{} #{}", std::filesystem::path(path).filename().string(), i + 1), {}};
    if (j[i].is_string()) {
      if (!tok) throw std::runtime_error(where + ": a text needs the model's tokenizer.json; give token ids");
      p.ids = encode(*tok, j[i].get<std::string>());
    } else if (j[i].is_array()) {
      for (const auto& v : j[i]) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
          throw std::runtime_error(fmt::format("{}: {} is not a token id in [0, {})", where, v.dump(), vocab));
        p.ids.push_back(v.get<int64_t>());
      }
    } else {
      throw std::runtime_error(where + ": expected a text or an array of token ids, got " + j[i].type_name());
    }
    if (p.ids.empty()) throw std::runtime_error(where + ": empty prompt");
    if (static_cast<int64_t>(p.ids.size()) > max_prompt)
      throw std::runtime_error(fmt::format("{}: {} tokens, more than the {} that fit the context with the generated ones",
                                           where, p.ids.size(), max_prompt));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace fuselm::cli
