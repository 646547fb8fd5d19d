// `tide train [config.json] [key=value ...]`: train a GPT. With no arguments it trains the
// embedded default (a small GPT on the Debian fortunes corpus, prepared on first use).
// Under `mpirun -np N` each process is one data-parallel rank.

#include <fmt/core.h>

#include <optional>

#include "commands.h"
#include "tide/comm/distributed.h"
#include "tide/train/preemption.h"
#include "tide/train/trainer.h"

namespace tide::app {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train",
      "Train a GPT model. Arguments: an optional JSON config file, then key=value overrides "
      "(e.g. optimizer.params.lr=3e-4 model.n_layer=6). No arguments: the embedded default "
      "run on the fortunes corpus.");
  struct Args {
    std::vector<std::string> positional;
    bool list_keys = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("args", args->positional, "[config.json] [key=value ...]");
  cmd->add_flag("--list-keys", args->list_keys, "list every config key with its default");
  cmd->callback([args] {
    if (args->list_keys) {
      fmt::print("{}", config_reference_markdown());
      return;
    }
    std::string config_path;
    std::vector<std::string> overrides;
    for (const std::string& a : args->positional) {
      if (a.find('=') == std::string::npos && config_path.empty() && overrides.empty())
        config_path = a;
      else
        overrides.push_back(a);
    }
    // SIGTERM / SIGINT: finish the step, checkpoint, exit 0 (docs/reliability.md).
    install_stop_signal_handlers();
    auto body = [&] {
      auto world = init_distributed();
      // A config error is the same on every rank: one line and exit code 1 on each, not a
      // line per rank and MPI_Abort (agree_on_errors; an error of one rank names it).
      std::optional<TrainConfig> cfg;
      agree_on_errors(*world, [&] {
        cfg = load_train_config(config_path, overrides, /*check_paths=*/true, world->size());
      });
      // DeepSpeed keys that cannot change the run: named once, in one line (rank 0).
      if (const std::string w = ignored_keys_warning(*cfg); !w.empty() && world->rank() == 0)
        fmt::print(stderr, "{}\n", w);
      Trainer trainer(std::move(*cfg), world);
      trainer.run();
    };
    // Under mpirun an error on one rank must end every rank at once (no hang).
    if (launched_by_mpirun()) {
      if (run_ranks(body) != 0) throw Error("training failed");
    } else {
      body();
    }
  });
}

}  // namespace tide::app
