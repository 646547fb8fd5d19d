// `tide prepare` (placeholder while the subcommand is being written)
#include "commands.h"
#include "tide/core/error.h"

namespace tide::app {
void add_prepare_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("prepare", "(in progress)");
  cmd->callback([] { TIDE_FAIL("tide prepare is not available in this build yet"); });
}
}  // namespace tide::app
