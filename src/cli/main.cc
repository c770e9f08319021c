// The fuselm command: one subcommand per file (cmd_<name>.cc), each adding itself to the app.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"fuselm: run Hugging Face causal LMs from their own captured graph on a C++ CPU engine"};
  app.require_subcommand(1);
  fuselm::cli::add_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    // Every user-facing failure is one line naming the file, tensor, op or field at fault.
    std::fprintf(stderr, "fuselm: error: %s\n", e.what());
    return 1;
  }
  return fuselm::cli::exit_code();
}
