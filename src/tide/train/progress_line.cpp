#include "tide/train/progress_line.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>

#include "tide/comm/distributed.h"

namespace tide {

bool progress_in_place(bool progress, bool stdout_is_terminal, bool under_launcher) {
  return progress && stdout_is_terminal && !under_launcher;
}

ProgressLine ProgressLine::for_stdout(bool progress) {
  return ProgressLine(
      progress_in_place(progress, isatty(STDOUT_FILENO) != 0, launched_by_mpirun()));
}

void ProgressLine::update(const std::string& line, bool logged) {
  if (in_place_) {
    // Trailing spaces wipe what a longer earlier line left.
    fmt::print("\r{}   ", line);
    open_ = true;
  } else if (logged) {
    fmt::print("{}\n", line);
  }
  std::fflush(stdout);
}

void ProgressLine::print(const std::string& text) {
  finish();
  fmt::print("{}\n", text);
  std::fflush(stdout);
}

void ProgressLine::finish() {
  if (!open_) return;
  fmt::print("\n");
  std::fflush(stdout);
  open_ = false;
}

}  // namespace tide
