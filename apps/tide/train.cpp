// `tide train` (placeholder while the subcommand is being written)
#include "commands.h"
#include "tide/core/error.h"

namespace tide::app {
void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "(in progress)");
  cmd->callback([] { TIDE_FAIL("tide train is not available in this build yet"); });
}
}  // namespace tide::app
