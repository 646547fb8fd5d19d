// `tide sample` (placeholder while the subcommand is being written)
#include "commands.h"
#include "tide/core/error.h"

namespace tide::app {
void add_sample_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sample", "(in progress)");
  cmd->callback([] { TIDE_FAIL("tide sample is not available in this build yet"); });
}
}  // namespace tide::app
