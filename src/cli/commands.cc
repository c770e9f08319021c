#include "cli/commands.h"

namespace fuselm::cli {
namespace {
int g_exit_code = 0;
}

void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

void add_commands(CLI::App& app) {
  add_generate_command(app);
  add_tokenize_command(app);
  add_inspect_command(app);
  add_serve_command(app);
  add_chat_command(app);
  add_apply_template_command(app);
  add_bench_command(app);
  add_verify_command(app);
}

}  // namespace fuselm::cli
