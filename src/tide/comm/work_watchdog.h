#pragma once
// WorkWatchdog: the collective watchdog for calls no host thread waits on. Why: an MPI call is
// watched by its own wait (MpiWork::wait gives up after comm.timeout_s), but a device's
// collective (NCCL on a GPU, its stand-in on sim:N) is consumed by a stream waiting on an event,
// so the host that hangs is stuck in the next stream synchronisation, in the CUDA driver, with
// nothing timing it. As PyTorch's NCCL watchdog does, one thread polls every watched call:
// - a call still incomplete `timeout_s()` seconds after it was issued is a hang: the watchdog
//   aborts every registered communicator (ncclCommAbort: NCCL's kernels stop spinning, so the
//   device and the host thread blocked on it are freed), then reports the call;
// - a communicator that reports an asynchronous error (ncclCommGetAsyncError: a peer's network
//   failed) is one too: every communicator is aborted and the error reported.
// It fires once. The report is the owner's: MpiEngine's holds the roll call that names the
// ranks that did not arrive and ends the job (mpi_engine.h), as for MPI's own waits.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/core/device.h"

namespace tide {

class WorkWatchdog {
 public:
  // What went wrong: `what` names the call ("all_reduce of 3.0 MiB on cuda:0"), `waited_s` how
  // long it had been in flight; `error` is empty for a timeout, else the communicator's error.
  struct Failure {
    std::string what;
    double waited_s = 0;
    std::string error;
  };
  using OnFailure = std::function<void(const Failure&)>;

  // `timeout_s` is read at every poll (comm.timeout_s may change after the watchdog starts);
  // `on_failure` runs on the watchdog's thread after the communicators were aborted.
  WorkWatchdog(std::function<double()> timeout_s, OnFailure on_failure,
               std::chrono::milliseconds poll = std::chrono::milliseconds(100));
  ~WorkWatchdog();  // stops the thread; what is still watched is dropped
  WorkWatchdog(const WorkWatchdog&) = delete;
  WorkWatchdog& operator=(const WorkWatchdog&) = delete;

  // Watches `work` (polled with is_completed()) from now on, until it completes.
  void watch(WorkPtr work, std::string what);

  // A communicator whose calls are watched: `abort` ends its pending calls (called once, on the
  // watchdog's thread, never after the Registration is gone); `error` returns its asynchronous
  // error, "" while there is none (may be empty).
  class Registration {
   public:
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    friend class WorkWatchdog;
    Registration(WorkWatchdog* owner, int id) : owner_(owner), id_(id) {}
    WorkWatchdog* owner_;
    int id_;
  };
  [[nodiscard]] std::unique_ptr<Registration> add_communicator(
      std::function<void()> abort, std::function<std::string()> error = {});

  // Calls being watched (issued, not yet seen complete), and whether the watchdog has fired.
  size_t watched() const;
  bool fired() const;

 private:
  struct Watched {
    WorkPtr work;
    std::string what;
    std::chrono::steady_clock::time_point issued;
  };
  struct Communicator {
    int id;
    std::function<void()> abort;
    std::function<std::string()> error;
  };
  void loop();
  // Drops completed calls; true, with `failure` filled, when one has hung or a communicator
  // reports an error (called under comm_mu_).
  bool check(Failure& failure);
  void remove_communicator(int id);

  std::function<double()> timeout_s_;
  OnFailure on_failure_;
  std::chrono::milliseconds poll_;
  mutable std::mutex mu_;  // watched_, stop_, fired_
  std::condition_variable cv_;
  std::list<Watched> watched_;
  bool stop_ = false, fired_ = false;
  // Held while a communicator's hooks run, so none runs after its Registration is gone.
  std::mutex comm_mu_;
  std::vector<Communicator> communicators_;
  int next_id_ = 0;
  std::thread thread_;
};

// A device group's side of the watchdog, as plain functions: the CUDA module's NCCL group calls
// them, so the program's one watchdog watches its calls (the module has no copy of the comm
// floor). Both are empty where the bootstrap group has no watchdog (one process, no MPI).
struct DeviceCallWatch {
  // Watches a call issued just now, named as MPI's calls are in the watchdog's line:
  // "all_reduce of 3.0 MiB on cuda:0 in the group of ranks 0, 2", "recv of 64 B from rank 2
  // (rank 1 of a group of 2) on sim:0". `peer`: the root or the peer (group rank), -1 for none.
  std::function<void(WorkPtr work, const char* op, uint64_t bytes, int peer)> watch;
  // Registers the group's communicator (WorkWatchdog::add_communicator); dropping the returned
  // token unregisters it.
  std::function<std::shared_ptr<void>(std::function<void()> abort,
                                      std::function<std::string()> error)>
      add_communicator;
};

// The watch of a device group on `device` over the ranks of `bootstrap` (its watchdog_link()).
DeviceCallWatch device_call_watch(ProcessGroup& bootstrap, Device device);

}  // namespace tide
