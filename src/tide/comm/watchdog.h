#pragma once
// The collective watchdog's report. Why: a rank that freezes (SIGSTOP, a hung device, a node
// gone silent) leaves every other rank blocked in its next collective forever, and MPI alone
// says nothing. tide's waits give up after comm.timeout_s (MpiWork::wait); the rank that gives
// up then wants to say which ranks are missing. It cannot ask them, so it holds a roll call:
// every rank that timed out sends a short note (its operation, step and wait) to every other
// rank on a communicator of its own, and listens for the others' notes for a bounded window.
// Ranks stuck in the same collective time out within about the same moment and answer; the
// ranks that send nothing are the ones that did not arrive. The lowest answering rank prints
// one line and calls MPI_Abort; the others abort a moment later (in case it died).
//
// What it cannot tell apart: a rank that is stopped, dead, deadlocked elsewhere, or simply still
// computing (a checkpoint write, corpus preparation, a slow step) longer than the timeout: all
// are "did not arrive". A rank that entered the collective more than the roll-call window
// (half the timeout, 1 to 30 s) after the first one gave up is also counted as missing. It does
// not see a rank that waits in a different collective of matching size (a program error that
// MPI would match anyway), and a process blocked inside MPI without tide's wait (MPI_Init,
// MPI_Finalize) is not watched.

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tide {

// What one rank reports in the roll call.
struct WatchdogNote {
  int rank = 0;
  int64_t step = -1;  // -1: not in a training step
  double waited_s = 0;
  std::string what;  // "all_reduce of 3.0 MiB"
};

// The line printed when a wait times out: `self` is the reporting rank's note, `answered` the
// notes of the other ranks that answered the roll call, `world` the job's size.
std::string watchdog_message(const WatchdogNote& self, const std::vector<WatchdogNote>& answered,
                             int world, double timeout_s);

// Holds the roll call on `comm` (a communicator of its own over the world) for at most
// `window_s` seconds and returns the notes of the other ranks that answered. Needs
// MPI_THREAD_MULTIPLE (it runs beside the engine thread).
std::vector<WatchdogNote> watchdog_roll_call(MPI_Comm comm, const WatchdogNote& self,
                                             double window_s);

// How an operation of a sub-group names ranks: by world rank, as the watchdog's line lists
// the ranks that did not arrive (a group rank there pointed at the wrong process).
// `world_ranks[g]` is the world rank of group rank g.
//   peer_name:    "rank 2 (rank 1 of a group of 2)"; just "rank 1" where the group rank is
//                 the world rank (the world, or a group of its first ranks)
//   group_suffix: "" for the world itself; " in the group of ranks 0, 2"; past 8 members
//                 " in a group of 16 ranks (0, 2, 4, 6, 8, 10, 12, 14 and 8 more)"
std::string peer_name(const std::vector<int>& world_ranks, int group_rank);
std::string group_suffix(const std::vector<int>& world_ranks, int world_size);

// "3.0 MiB", "12 B": sizes in the watchdog's messages.
std::string human_bytes(uint64_t bytes);

}  // namespace tide
