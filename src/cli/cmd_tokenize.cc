// fuselm tokenize: token ids of a text, or the text of ids, with a model's tokenizer and its rule
// for special tokens (cli/model_tokenizer.h): any model source generate takes, or a tokenizer.json.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_tokenizer.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/prompt_tokenizer.h"

namespace fuselm::cli {
namespace {

struct TokenizeOptions {
  std::string path;
  std::string text;
  std::string file;
  std::string jsonl;
  std::string decode;
  bool no_special = false;
  bool json = false;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::uint32_t> parse_ids(const std::string& list) {
  std::vector<std::uint32_t> ids;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    unsigned long long v = 0;
    try {
      v = std::stoull(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v > 0xFFFFFFFFull) {
      throw std::runtime_error("--decode: '" + item + "' is not a token id");
    }
    ids.push_back(static_cast<std::uint32_t>(v));
  }
  return ids;
}

std::string join_ids(const std::vector<std::uint32_t>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  return out;
}

// --jsonl: one JSON value per line. A string is encoded (prints its id array); an array of ids is
// decoded (prints {"text": decode, "stream": the StreamDecoder chunks}). Used by the parity tests.
void run_jsonl(const tokenizer::PromptTokenizer& tok, const TokenizeOptions& o) {
  std::ifstream in(o.jsonl, std::ios::binary);
  if (!in) throw std::runtime_error(o.jsonl + ": cannot open");
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw std::runtime_error(o.jsonl + ":" + std::to_string(line_no) +
                               ": malformed JSON: " + e.what());
    }
    if (value.is_string()) {
      const auto ids = tok.encode(value.get<std::string>(), !o.no_special);
      std::cout << nlohmann::json(ids).dump() << '\n';
    } else if (value.is_array()) {
      const auto ids = value.get<std::vector<std::uint32_t>>();
      tokenizer::StreamDecoder stream(tok.tokenizer(), o.no_special);
      nlohmann::json chunks = nlohmann::json::array();
      for (std::uint32_t id : ids) chunks.push_back(stream.step(id));
      chunks.push_back(stream.flush());
      nlohmann::json out = {{"text", tok.tokenizer().decode(ids, o.no_special)}, {"stream", chunks}};
      std::cout << out.dump() << '\n';
    } else {
      throw std::runtime_error(o.jsonl + ":" + std::to_string(line_no) +
                               ": expected a JSON string or an array of ids");
    }
  }
}

void run(const TokenizeOptions& o) {
  const auto tok = prompt_tokenizer_of(o.path);
  if (!o.jsonl.empty()) {
    run_jsonl(tok, o);
    return;
  }
  if (!o.decode.empty()) {
    const std::string text = tok.tokenizer().decode(parse_ids(o.decode), o.no_special);
    if (o.json) std::cout << nlohmann::json({{"text", text}}).dump() << '\n';
    else std::cout << text << '\n';
    return;
  }
  const std::string text = o.file.empty() ? o.text : read_file(o.file);
  const auto ids = tok.encode(text, !o.no_special);
  if (o.json) std::cout << nlohmann::json({{"ids", ids}}).dump() << '\n';
  else std::cout << join_ids(ids) << '\n';
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "print the token ids of a text (or the text of ids) with a model's tokenizer, special tokens as its files say");
  cmd->add_option("model", o->path,
                  "a model as generate takes it (Hugging Face directory, .gguf file or a directory holding one), or a "
                  "tokenizer.json; default: the default model");
  auto* text = cmd->add_option("--text", o->text, "text to encode");
  auto* file = cmd->add_option("--file", o->file, "file whose contents to encode");
  auto* decode =
      cmd->add_option("--decode", o->decode, "comma-separated ids to decode, e.g. 1,2,3");
  auto* jsonl = cmd->add_option("--jsonl", o->jsonl,
                                "file of JSON lines: strings to encode, id arrays to decode")
                    ->group("");  // hidden: for the parity tests
  cmd->add_flag("--no-special", o->no_special,
                "encode without the special tokens the model's files add (e.g. BOS); decode skipping "
                "special tokens");
  cmd->add_flag("--json", o->json, "print {\"ids\": [...]} (or {\"text\": ...} with --decode)");
  text->excludes(file)->excludes(decode)->excludes(jsonl);
  file->excludes(decode)->excludes(jsonl);
  decode->excludes(jsonl);
  cmd->callback([o, text, file, decode, jsonl] {
    if (text->count() + file->count() + decode->count() + jsonl->count() == 0) {
      throw std::runtime_error("tokenize: give --text, --file or --decode");
    }
    run(*o);
  });
}

}  // namespace fuselm::cli
