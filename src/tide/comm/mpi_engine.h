#pragma once
// MpiEngine: one thread per process that makes every MPI call after MPI_Init (except MPI_Abort).
//
// Why a thread: the data-parallel trainer starts a gradient all-reduce and goes on computing the
// next block's backward. MPI moves data only while some thread is inside an MPI call (OpenMPI
// has no asynchronous progress for shared memory or TCP: `ompi_info` says "OMPI progress: no"),
// so a non-blocking collective started by the trainer would sit idle until its wait(). The
// engine thread keeps testing the pending requests and so overlaps communication with compute.
//
// Why one thread for all groups: requests and communicator creation are then serialised through
// one thread, so collectives on a communicator are always started in the caller's order and MPI
// needs only MPI_THREAD_SERIALIZED. We request MPI_THREAD_MULTIPLE anyway (OpenMPI provides it)
// because MPI_Abort may be called from the failing thread while the engine is inside MPI_Test.
//
// An operation is a small state machine (MpiOp): start() posts non-blocking calls, progress()
// tests them, advances (a ring algorithm posts its next step) and reports when it is finished.
//
// The watchdog: every wait on an operation (MpiWork::wait) gives up after timeout_s() seconds
// (comm.timeout_s, default 600 like PyTorch's NCCL default). The rank that gives up holds a
// short roll call (watchdog.h) with the other ranks that gave up too, prints one line naming
// the operation, the training step and the ranks that did not arrive, and calls MPI_Abort, so
// no rank of the job hangs.

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/comm/work_watchdog.h"

namespace tide {

class MpiOp {
 public:
  virtual ~MpiOp() = default;
  virtual void start() = 0;
  // Returns true once the operation is complete (its results are in the output buffers).
  virtual bool progress() = 0;
};

class MpiEngine;

// The handle the caller waits on; the engine marks it finished. `what` describes the operation
// for the watchdog's message ("all_reduce of 3.0 MiB").
class MpiWork final : public Work {
 public:
  MpiWork(MpiEngine* engine, std::string what) : engine_(engine), what_(std::move(what)) {}
  // Waits at most the engine's timeout; past it the watchdog ends the job (never returns).
  void wait() override;
  bool is_completed() override;
  void finish(std::exception_ptr error);
  const std::string& what() const { return what_; }

 private:
  MpiEngine* engine_;
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class MpiEngine {
 public:
  // Initialises MPI (MPI_Init_thread) and starts the engine thread. Call once per process.
  MpiEngine();
  // Stops the thread and calls MPI_Finalize.
  ~MpiEngine();
  MpiEngine(const MpiEngine&) = delete;
  MpiEngine& operator=(const MpiEngine&) = delete;

  // Queues `op`; it is started after every op submitted before it. `what` names it for the
  // watchdog ("all_reduce of 3.0 MiB").
  std::shared_ptr<MpiWork> submit(std::unique_ptr<MpiOp> op, std::string what = "an MPI call");
  // Runs `fn` on the engine thread (in queue order) and waits for it; rethrows its exception.
  // For blocking setup calls such as MPI_Comm_split.
  void run(std::function<void()> fn, std::string what = "an MPI setup call");

  // The MPI_Op that sums elements of `t`: MPI_SUM over MPI_FLOAT for f32; for bf16 and f16,
  // which MPI cannot add, user-defined ops over MPI_UINT16_T (core/dtype.h's rounding), made
  // once by the engine's thread and freed before MPI_Finalize.
  MPI_Op sum_op(DType t) const;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int thread_level() const { return thread_level_; }

  // The watchdog's limit on every wait, in seconds (> 0; default kDefaultCommTimeout).
  static constexpr double kDefaultCommTimeout = 600;
  void set_timeout(double seconds);
  double timeout() const { return timeout_s_.load(); }
  // The training step, named in the watchdog's message (-1: none).
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_.load(); }
  // Called by a wait that ran out of time: roll call, one line on stderr, MPI_Abort.
  [[noreturn]] void on_timeout(const std::string& what, double waited_s);
  // The watchdog of the device groups' calls (work_watchdog.h), made on first use: a hung call
  // ends the job through on_timeout, a communicator's error with one line and MPI_Abort.
  std::shared_ptr<WorkWatchdog> work_watchdog();

 private:
  void loop();

  int world_rank_ = 0, world_size_ = 1, thread_level_ = 0;
  std::atomic<double> timeout_s_{kDefaultCommTimeout};
  std::atomic<int64_t> step_{-1};
  MPI_Comm watchdog_comm_ = MPI_COMM_NULL;  // the roll call's messages, nothing else
  std::mutex work_watchdog_mu_;
  std::shared_ptr<WorkWatchdog> work_watchdog_;
  MPI_Op bf16_sum_ = MPI_OP_NULL, f16_sum_ = MPI_OP_NULL;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  struct Pending {
    std::unique_ptr<MpiOp> op;
    std::shared_ptr<MpiWork> work;
  };
  std::deque<Pending> queue_;
  std::thread thread_;
};

// The process's engine: created on first use (which initialises MPI), kept alive by every MPI
// group that holds it, finalised when the last holder is gone at exit.
std::shared_ptr<MpiEngine> mpi_engine();

// Throws if `n` elements do not fit MPI's int count.
int mpi_count(int64_t n, const char* who);

}  // namespace tide
