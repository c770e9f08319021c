// fuselm tokenize: placeholder until the tokenizer lands.
#include "cli/commands.h"

namespace fuselm::cli {
void add_tokenize_command(CLI::App& app) {
  app.add_subcommand("tokenize", "print the token ids of a text");
}
}  // namespace fuselm::cli
