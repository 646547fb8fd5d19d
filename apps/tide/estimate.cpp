// `tide estimate` (placeholder while the subcommand is being written)
#include "commands.h"
#include "tide/core/error.h"

namespace tide::app {
void add_estimate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("estimate", "(in progress)");
  cmd->callback([] { TIDE_FAIL("tide estimate is not available in this build yet"); });
}
}  // namespace tide::app
