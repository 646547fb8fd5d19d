#pragma once
// Command lines of the benchmark programs, through CLI11: --help prints the options and exits,
// a bad or unknown option becomes a tide::Error naming it (each program prints it as one line).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "tide/core/error.h"

namespace tide::bench {

inline void parse_args(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    TIDE_FAIL("{}; see --help", e.what());
  }
}

// The op benchmarks' shape options (one GPT-2 layer and its head: batch, sequence, width,
// heads, vocabulary) and their repetitions.
template <class Int>
void add_op_shape_options(CLI::App& app, Int& B, Int& T, Int& C, Int& NH, Int& V, int& reps) {
  app.add_option("--B", B)->capture_default_str();
  app.add_option("--T", T)->capture_default_str();
  app.add_option("--C", C)->capture_default_str();
  app.add_option("--NH", NH)->capture_default_str();
  app.add_option("--V", V)->capture_default_str();
  app.add_option("--reps", reps)->capture_default_str();
}

// The GPT shape and micro-batch options the training benchmarks share.
struct ModelShapeArgs {
  int& layers;
  int& embd;
  int& heads;
  int& vocab;
  int& seq_len;
  int& micro_batch;
};
inline void add_model_shape_options(CLI::App& app, const ModelShapeArgs& m) {
  app.add_option("--layers", m.layers)->capture_default_str();
  app.add_option("--embd", m.embd)->capture_default_str();
  app.add_option("--heads", m.heads)->capture_default_str();
  app.add_option("--vocab", m.vocab)->capture_default_str();
  app.add_option("--seq-len", m.seq_len)->capture_default_str();
  app.add_option("--micro-batch", m.micro_batch)->capture_default_str();
}

}  // namespace tide::bench
