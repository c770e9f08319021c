#pragma once
// Subcommand registry of the fuselm CLI. Each cmd_<name>.cc defines add_<name>_command, which adds
// a subcommand and its callback. A callback reports failure by throwing (main prints one line
// "fuselm: error: ..." and exits 1) or by set_exit_code for a non-error status.
#include <CLI/CLI.hpp>

namespace fuselm::cli {

void add_commands(CLI::App& app);

/// Records the exit code of the command that ran (default 0).
void set_exit_code(int code);
int exit_code();

void add_generate_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_apply_template_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_verify_command(CLI::App& app);

}  // namespace fuselm::cli
