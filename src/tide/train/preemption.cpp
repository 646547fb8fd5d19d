#include "tide/train/preemption.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

#include "tide/comm/distributed.h"

namespace tide {

namespace {

std::atomic<int> g_stop{0};  // 0, or the signal that asked for the stop
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");
// Where the progress line may be open on the terminal (progress_line.h: a terminal of one
// process), the handler's note starts on a new line; elsewhere (a file, mpirun's ranks) a
// leading newline would only leave a blank line. Set once, when the handlers are installed.
std::atomic<bool> g_newline_first{false};

void say(const char* text) {
  const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)n;
}

void on_stop_signal(int sig) {
  if (g_stop.exchange(sig) != 0) {
    say("tide: second signal: exiting now, without a checkpoint\n");
    ::_exit(128 + sig);
  }
  if (g_newline_first.load()) say("\n");
  say("tide: stop requested: finishing this step, then writing a checkpoint (signal again to "
      "exit at once)\n");
}

}  // namespace

void install_stop_signal_handlers() {
  g_newline_first = isatty(STDOUT_FILENO) && !launched_by_mpirun();
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // interrupted reads and writes resume
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

bool stop_requested() {
  return g_stop.load() != 0;
}

void request_stop() {
  g_stop = SIGTERM;
}

void clear_stop_request() {
  g_stop = 0;
}

}  // namespace tide
