#include "cli/model_tokenizer.h"

#include <stdexcept>
#include <string>
#include <system_error>

#include "cli/model_args.h"
#include "weights/gguf.h"

namespace fuselm::cli {
namespace fs = std::filesystem;

namespace {

// One of the GGUF's add_bos/add_eos flags: the id of the token it adds, or nothing when the flag
// is absent or false.
std::optional<std::uint32_t> gguf_added_token(const weights::GgufFile& g, const std::string& flag, const std::string& id_key) {
  if (!g.find_value(flag) || !g.get_bool(flag)) return std::nullopt;
  if (!g.find_value(id_key))
    throw std::runtime_error(g.path().string() + ": " + flag + " is true but " + id_key + " is absent");
  const uint64_t id = g.get_uint(id_key);
  if (id > UINT32_MAX) throw std::runtime_error(g.path().string() + ": " + id_key + " = " + std::to_string(id) + " is not a token id");
  return static_cast<std::uint32_t>(id);
}

tokenizer::SpecialTokenRules gguf_rules(const fs::path& link) {
  std::error_code ec;
  fs::path file = fs::weakly_canonical(link, ec);  // name the user's file, not the link
  if (ec) file = link;
  const auto g = weights::GgufFile::open(file);
  tokenizer::SpecialTokenRules r;
  r.from_post_processor = false;
  if (auto bos = gguf_added_token(g, "tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id")) r.prefix.push_back(*bos);
  if (auto eos = gguf_added_token(g, "tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id")) r.suffix.push_back(*eos);
  r.origin = file.string() + ": tokenizer.ggml.add_bos_token / add_eos_token";
  return r;
}

}  // namespace

tokenizer::SpecialTokenRules special_token_rules(const fs::path& dir) {
  if (fs::exists(dir / "model.gguf")) return gguf_rules(dir / "model.gguf");
  tokenizer::SpecialTokenRules r;
  r.origin = (dir / "tokenizer.json").string() + ": post_processor";
  return r;
}

std::optional<tokenizer::PromptTokenizer> load_prompt_tokenizer(const fs::path& dir) {
  const fs::path file = dir / "tokenizer.json";
  if (!fs::exists(file)) return std::nullopt;
  return tokenizer::PromptTokenizer(tokenizer::Tokenizer::from_file(file.string()), special_token_rules(dir));
}

tokenizer::PromptTokenizer prompt_tokenizer_of(const std::string& source) {
  const fs::path p(source);
  if (!source.empty() && fs::is_regular_file(p) && p.extension() != ".gguf") {  // a tokenizer.json by its path
    tokenizer::SpecialTokenRules r;
    r.origin = source + ": post_processor";
    return tokenizer::PromptTokenizer(tokenizer::Tokenizer::from_file(source), std::move(r));
  }
  const fs::path dir = model_dir_of(source);
  if (!fs::is_directory(dir)) throw std::runtime_error(dir.string() + ": no such model directory, .gguf file or tokenizer.json");
  auto tok = load_prompt_tokenizer(dir);
  if (!tok) throw std::runtime_error(dir.string() + ": has no tokenizer.json");
  return std::move(*tok);
}

}  // namespace fuselm::cli
