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

}  // namespace tide::bench
