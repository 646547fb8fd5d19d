// `tide schedule`: generate a pipeline schedule, simulate it, and draw its timeline.
//   tide schedule --stages 4 --microbatches 8 --schedule zb-h1 --tf 1 --tb 1 --tw 1
//                 [--tcomm 0] [--mb 1 --mw 0.28] [--memory-limit X] [--chunks 2]
//                 [--svg out.svg] [--trace out.json] [--width 120]
#include <fmt/format.h>

#include <cstdio>
#include <fstream>

#include "commands.h"
#include "tide/core/error.h"
#include "tide/pipeline/generators.h"
#include "tide/pipeline/timeline.h"

namespace tide::app {

namespace {

struct ScheduleArgs {
  pipeline::ScheduleOptions opt;
  std::string svg, trace;
  int width = 0;
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  TIDE_CHECK(f.good(), "cannot open '{}' for writing; check the directory exists and is writable",
             path);
  f << text;
  TIDE_CHECK(f.good(), "writing '{}' failed (disk full?)", path);
}

void run(const ScheduleArgs& a) {
  TIDE_CHECK(a.width == 0 || a.width >= 10,
             "--width must be 0 (automatic) or at least 10 characters, got {}", a.width);
  const pipeline::Schedule s = pipeline::build_schedule(a.opt);
  const pipeline::SimResult r = pipeline::simulate(s, a.opt.cost);
  fmt::print("{}\n{}", pipeline::ascii_timeline(s, r, a.width), pipeline::summary_table(s, r));
  if (!a.svg.empty()) {
    write_file(a.svg, pipeline::svg_timeline(s, r));
    fmt::print("wrote {}\n", a.svg);
  }
  if (!a.trace.empty()) {
    write_file(a.trace, pipeline::chrome_trace(s, r));
    fmt::print("wrote {} (open in https://ui.perfetto.dev)\n", a.trace);
  }
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto args = std::make_shared<ScheduleArgs>();
  auto& o = args->opt;
  // Default M_W / M_B: the paper's M_W = 32sbh over M_B = sb(34h + 5as) per layer is
  // 32 / (34 + 5 s / head_dim) = 0.28 for sequence 2048 and head dim 128.
  o.cost.m_w = 0.28;
  auto* cmd = app.add_subcommand("schedule",
                                 "generate a pipeline schedule, simulate it and draw its timeline");
  std::string names;
  for (const auto& n : pipeline::schedule_names()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option("--schedule", o.schedule, "one of: " + names)->capture_default_str();
  cmd->add_option("--stages,-p", o.stages, "pipeline stages p")->capture_default_str();
  cmd->add_option("--microbatches,-m", o.microbatches, "micro-batches m per step")
      ->capture_default_str();
  cmd->add_option("--tf", o.cost.t_f, "forward time per micro-batch and stage")
      ->capture_default_str();
  cmd->add_option("--tb", o.cost.t_b, "input-gradient backward time (B)")->capture_default_str();
  cmd->add_option("--tw", o.cost.t_w, "weight-gradient backward time (W)")->capture_default_str();
  cmd->add_option("--tcomm", o.cost.t_comm, "stage-to-stage send latency")->capture_default_str();
  cmd->add_option("--mb", o.cost.m_b, "activation memory per micro-batch and stage (M_B)")
      ->capture_default_str();
  cmd->add_option("--mw", o.cost.m_w, "part of M_B kept from B until W (M_W)")
      ->capture_default_str();
  cmd->add_option("--memory-limit", o.memory_limit,
                  "activation memory limit per stage (same unit as --mb); 0 = none, zb-auto "
                  "then uses 1F1B's peak p*M_B")
      ->capture_default_str();
  cmd->add_option("--chunks", o.chunks, "model chunks per stage for interleaved")
      ->capture_default_str();
  cmd->add_option("--svg", args->svg, "write an SVG timeline here");
  cmd->add_option("--trace", args->trace, "write a Chrome-trace JSON here (opens in Perfetto)");
  cmd->add_option("--width", args->width,
                  "characters for the ASCII timeline; 0 = 4 per shortest pass, at most 240")
      ->capture_default_str();
  cmd->callback([args] { run(*args); });
}

}  // namespace tide::app
