// tide: train GPT models too large for one device. `tide --help` lists the subcommands.

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "commands.h"
#include "tide/comm/distributed.h"
#include "tide/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"tide: train transformer language models too large for one device"};
  app.require_subcommand(0, 1);
  // TIDE_VERSION and TIDE_GIT_COMMIT come from CMake (the commit when it was configured).
  const std::string commit = TIDE_GIT_COMMIT;
  app.set_version_flag("--version", fmt::format("tide {}{}", TIDE_VERSION,
                                                commit.empty() ? "" : " (git " + commit + ")"));
  tide::app::add_train_command(app);
  tide::app::add_prepare_command(app);
  tide::app::add_sample_command(app);
  tide::app::add_estimate_command(app);
  tide::app::add_schedule_command(app);
  tide::app::add_export_command(app);
  tide::app::add_import_command(app);
  try {
    // `tide` alone runs the embedded default: the same as `tide train`.
    if (argc == 1) {
      app.parse(std::vector<std::string>{"train"});
    } else {
      app.parse(argc, argv);
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tide::AgreedError& e) {
    // Every rank raised it; one of them reports it.
    if (e.report()) {
      std::fflush(stdout);
      fmt::print(stderr, "tide: error: {}\n", e.what());
    }
    return 1;
  } catch (const tide::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "\ntide: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "\ntide: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
