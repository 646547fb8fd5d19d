#include "tide/comm/watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace tide {

namespace {

constexpr int kRollCallTag = 7;

// The fixed-size message of the roll call.
struct Wire {
  int64_t step;
  double waited_s;
  char what[256];  // the longest operation names a peer and a group of 8
};

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string at_step(int64_t step) {
  return step >= 0 ? fmt::format(" at step {}", step) : "";
}

}  // namespace

std::string human_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < 1024 * 1024) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < uint64_t{1024} * 1024 * 1024) return fmt::format("{:.1f} MiB", bytes / 1048576.0);
  return fmt::format("{:.2f} GiB", bytes / 1073741824.0);
}

std::string watchdog_message(const WatchdogNote& self, const std::vector<WatchdogNote>& answered,
                             int world, double timeout_s) {
  std::vector<bool> present(static_cast<size_t>(world), false);
  present[static_cast<size_t>(self.rank)] = true;
  for (const WatchdogNote& n : answered) present[static_cast<size_t>(n.rank)] = true;
  std::vector<int> missing, waiting;
  for (int r = 0; r < world; ++r)
    (present[static_cast<size_t>(r)] ? waiting : missing).push_back(r);
  std::string s = fmt::format(
      "communication timed out: rank {} waited {:.0f} s (comm.timeout_s = {:g}) in {}{}", self.rank,
      self.waited_s, timeout_s, self.what, at_step(self.step));
  if (missing.empty())
    s += "; every rank is waiting, in different operations";
  else
    s += fmt::format("; rank{} {} did not arrive (stopped, dead, or busy elsewhere)",
                     missing.size() > 1 ? "s" : "", rank_list(missing));
  if (waiting.size() > 1) s += fmt::format("; waiting: ranks {}", rank_list(waiting));
  // Ranks waiting in another operation or step point at a program error, not a lost rank.
  for (const WatchdogNote& n : answered)
    if (n.what != self.what || n.step != self.step)
      s += fmt::format(" (rank {} in {}{})", n.rank, n.what, at_step(n.step));
  return s;
}

std::string peer_name(const std::vector<int>& world_ranks, int group_rank) {
  const int n = static_cast<int>(world_ranks.size());
  if (group_rank < 0 || group_rank >= n ||
      world_ranks[static_cast<size_t>(group_rank)] == group_rank)
    return fmt::format("rank {}", group_rank);
  return fmt::format("rank {} (rank {} of a group of {})",
                     world_ranks[static_cast<size_t>(group_rank)], group_rank, n);
}

std::string group_suffix(const std::vector<int>& world_ranks, int world_size) {
  bool world = static_cast<int>(world_ranks.size()) == world_size;
  for (size_t g = 0; g < world_ranks.size() && world; ++g)
    world = world_ranks[g] == static_cast<int>(g);
  if (world) return "";
  constexpr size_t kShown = 8;
  if (world_ranks.size() <= kShown) return " in the group of ranks " + rank_list(world_ranks);
  const std::vector<int> shown(world_ranks.begin(), world_ranks.begin() + kShown);
  return fmt::format(" in a group of {} ranks ({} and {} more)", world_ranks.size(),
                     rank_list(shown), world_ranks.size() - kShown);
}

std::vector<WatchdogNote> watchdog_roll_call(MPI_Comm comm, const WatchdogNote& self,
                                             double window_s) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  Wire mine{};
  mine.step = self.step;
  mine.waited_s = self.waited_s;
  std::strncpy(mine.what, self.what.c_str(), sizeof(mine.what) - 1);
  std::vector<Wire> theirs(static_cast<size_t>(size));
  std::vector<MPI_Request> sends, recvs(static_cast<size_t>(size), MPI_REQUEST_NULL);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    sends.emplace_back();
    MPI_Isend(&mine, sizeof(Wire), MPI_BYTE, r, kRollCallTag, comm, &sends.back());
    MPI_Irecv(&theirs[static_cast<size_t>(r)], sizeof(Wire), MPI_BYTE, r, kRollCallTag, comm,
              &recvs[static_cast<size_t>(r)]);
  }
  // Bounded: listen until every other rank answered or the window closes. Requests still
  // pending are abandoned (the job is about to be aborted).
  std::vector<bool> got(static_cast<size_t>(size), false);
  int pending = size - 1;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(window_s);
  while (pending > 0 && std::chrono::steady_clock::now() < end) {
    for (int r = 0; r < size; ++r) {
      if (r == rank || got[static_cast<size_t>(r)]) continue;
      int flag = 0;
      MPI_Test(&recvs[static_cast<size_t>(r)], &flag, MPI_STATUS_IGNORE);
      if (flag) got[static_cast<size_t>(r)] = true, --pending;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::vector<WatchdogNote> notes;
  for (int r = 0; r < size; ++r) {
    if (!got[static_cast<size_t>(r)]) continue;
    const Wire& w = theirs[static_cast<size_t>(r)];
    notes.push_back({r, w.step, w.waited_s, std::string(w.what, strnlen(w.what, sizeof(w.what)))});
  }
  return notes;
}

}  // namespace tide
