// `tide schedule` (placeholder while the subcommand is being written)
#include "commands.h"
#include "tide/core/error.h"

namespace tide::app {
void add_schedule_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("schedule", "(in progress)");
  cmd->callback([] { TIDE_FAIL("tide schedule is not available in this build yet"); });
}
}  // namespace tide::app
