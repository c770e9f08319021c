// The fuselm command: one subcommand per file (cmd_<name>.cc), each adding itself to the app.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "ir/load.h"

int main(int argc, char** argv) {
  CLI::App app{"fuselm: run Hugging Face causal LMs from their own captured graph on a C++ CPU engine"};
  // The capture version too: an IR captured by other capture code is stale (docs/ir.md).
  app.set_version_flag("--version", std::string("fuselm ") + FUSELM_VERSION + " (capture " +
                                        fuselm::ir::kCaptureVersion + ")");
  app.require_subcommand(1);
  fuselm::cli::add_commands(app);
  // CLI11 would answer a misspelt subcommand with "a subcommand is required": name it instead.
  std::string names;
  bool known = false;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known = known || (argc > 1 && sub->check_name(argv[1]));
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::fprintf(stderr, "fuselm: error: unknown subcommand '%s' (choose one of: %s; see --help)\n", argv[1], names.c_str());
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // CLI11 would print the message and a "Run with --help" line; ours is one line.
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n' || c == '\r') c = ' ';
    std::fprintf(stderr, "fuselm: error: %s (see --help)\n", msg.c_str());
    return e.get_exit_code();
  } catch (const std::exception& e) {
    // Every user-facing failure is one line naming the file, tensor, op or field at fault.
    std::fprintf(stderr, "fuselm: error: %s\n", e.what());
    return 1;
  }
  return fuselm::cli::exit_code();
}
