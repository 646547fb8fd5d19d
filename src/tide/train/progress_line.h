#pragma once
// The training progress on stdout: one line per update, or, where stdout is a terminal of this
// process alone, one line rewritten in place with '\r' (and other messages printed below it).
//
// Why not isatty() alone: under mpirun every rank's stdout is a pseudo-terminal that mpirun
// forwards to its own stdout, whatever that is (a file, a pipe, or a terminal shared with the
// other ranks). The ranks then see a terminal where there is none, and `mpirun ... > log` got
// every update joined by '\r' into one line. So a process started by an MPI launcher (the
// variables comm/distributed.h looks for) never rewrites in place.

#include <string>

namespace tide {

// Whether the progress line is rewritten in place: `progress` (log.progress) on, stdout a
// terminal, and no MPI launcher.
bool progress_in_place(bool progress, bool stdout_is_terminal, bool under_launcher);

class ProgressLine {
 public:
  // in_place: as progress_in_place() says for this process.
  explicit ProgressLine(bool in_place) : in_place_(in_place) {}
  // For this process: log.progress, isatty(stdout) and launched_by_mpirun().
  static ProgressLine for_stdout(bool progress);

  bool in_place() const { return in_place_; }
  // A progress update. `logged`: also a line of its own when not in place (the log.interval
  // steps); in place every update rewrites the line.
  void update(const std::string& line, bool logged);
  // A message line (no trailing newline in `text`): below an open in-place line.
  void print(const std::string& text);
  // Ends an open in-place line (before an error message, or at the end of the run).
  void finish();

 private:
  bool in_place_;
  bool open_ = false;  // an in-place line is on the terminal without its newline
};

}  // namespace tide
