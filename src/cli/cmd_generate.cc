// fuselm generate: placeholder until the engine lands.
#include "cli/commands.h"

namespace fuselm::cli {
void add_generate_command(CLI::App& app) {
  app.add_subcommand("generate", "generate text from a prompt");
}
}  // namespace fuselm::cli
