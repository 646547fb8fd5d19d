// tide: train GPT models too large for one device. `tide --help` lists the subcommands.

#include <fmt/core.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "tide/comm/distributed.h"
#include "tide/core/error.h"
#include "tide/kernels/cpu/openblas_core.h"

namespace {

// OpenMP's default wait policy lets idle threads spin before they sleep. When the cores are
// shared (other jobs, or several MPI ranks per core) the spinning threads take the cores from
// the ones with work: 2 threads ran 2.3-3.3x slower than 1 and AdamW's short parallel regions
// 6-28x slower, while with `passive` 2 threads match 1 thread under load and the step is the
// same on an idle machine (bench/RESULTS.md, "OMP_WAIT_POLICY=passive under load"). libgomp
// reads the policy once, when it is loaded, so tide sets it and re-executes itself, unless the
// user chose a policy.
// The same for OpenBLAS's kernels: where its detection fell back to the generic ones, the
// CPU's vector kernels (kernels/cpu/openblas_core.h: 3.3x the default job's tokens/s on an
// Emerald Rapids VM). One re-execution for both settings.
void prefer_runtime_settings(char** argv) {
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr)
    changed = setenv("OMP_WAIT_POLICY", "passive", 1) == 0;
  changed = tide::cpu::choose_vector_openblas_kernels() || changed;
  if (changed) execv("/proc/self/exe", argv);  // returns only if it failed: run on as we are
}

}  // namespace

int main(int argc, char** argv) {
  prefer_runtime_settings(argv);
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
    } else if (std::string_view(argv[1]) == "help") {
      // `tide help` is `tide --help`, `tide help train` is `tide train --help`, as in git.
      std::vector<std::string> args(argv + 2, argv + argc);
      args.push_back("--help");
      std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
      app.name(argv[0]);                       // as parse(argc, argv) names it in the usage
      app.parse(args);
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
    fmt::print(stderr, "tide: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "tide: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
