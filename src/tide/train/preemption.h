#pragma once
// Preemption: SIGTERM (what Slurm and Kubernetes send before killing a job) or SIGINT (Ctrl-C)
// asks `tide train` to stop cleanly: every rank finishes the step it is in, the ranks agree on
// the step to stop at (the stop flag rides in the per-step loss all-reduce, so a signal that
// reaches ranks at different steps still stops them all at the same one), rank 0 writes a
// resumable checkpoint and every rank exits 0 with the command to resume. A second signal ends
// the process at once (exit code 128 + signal), without a checkpoint.
//
// The handlers only set a flag (async-signal-safe); they are installed by `tide train` alone,
// never by the library, so programs embedding the Trainer keep their own signal handling.

namespace tide {

// Installs the SIGTERM and SIGINT handlers described above.
void install_stop_signal_handlers();
// True once a stop was requested in this process (a signal, or request_stop()).
bool stop_requested();
// The same as receiving the first signal (tests; programs with their own handlers).
void request_stop();
void clear_stop_request();

}  // namespace tide
