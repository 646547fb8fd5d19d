#pragma once
// The simulated asynchronous device ("sim:N"). Why: tide's GPU orchestration (ops queued on a
// compute stream, copies on their own stream, events ordering the two, the host reading
// results only after a wait) must be tested on every CI run, and CI has no GPU. Here a stream
// is a worker thread that runs its queued tasks (CPU kernels, copies) in order, an event is a
// point in a stream that other streams or the host wait for, and the device's memory
// (SimAllocator) is host memory that the host may touch only through the mover, after a wait.
// A missing wait is then a real data race between the worker and the host: under
// ThreadSanitizer (OpenMP off) it fails the test that has it, as it would corrupt a GPU run.
//
// Errors inside a task (a CPU kernel's throw, e.g. a token id out of range) are sticky, as
// CUDA's asynchronous errors are: the stream skips its remaining tasks and the next
// synchronize() on it (or on an event recorded after the error) throws the error.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "tide/core/device.h"

namespace tide {

// A point in a stream: set once the stream has run every task queued before it.
class SimEvent {
 public:
  void set(std::exception_ptr error);
  // Blocks until set; rethrows the error of the stream it was recorded on, if any.
  void wait() const;
  bool done() const;

 private:
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class SimStream {
 public:
  // `threads`: the OpenMP threads the stream's CPU kernels use (set on its worker thread).
  SimStream(Device device, int threads);
  ~SimStream();  // runs what is queued, then stops the worker
  SimStream(const SimStream&) = delete;
  SimStream& operator=(const SimStream&) = delete;

  Device device() const { return device_; }
  // Queues `task`; returns at once.
  void enqueue(std::function<void()> task);
  // An event set when every task queued so far has run.
  std::shared_ptr<SimEvent> record();
  // Later tasks of this stream start only once `event` is set (it may belong to another stream).
  void wait(std::shared_ptr<const SimEvent> event);
  // Blocks the host until every task queued so far has run; throws the stream's sticky error.
  void synchronize();
  // How many times the host has blocked in synchronize(), or in a wait for a collective
  // ordered after this stream's work (SimCollectiveGroup's Work::wait, count_host_wait): each
  // costs a GPU its queue (the device idles until the host queues more), so tests hold a step
  // to the ones it needs.
  uint64_t synchronizations() const { return synchronizations_.load(std::memory_order_relaxed); }
  void count_host_wait() { synchronizations_.fetch_add(1, std::memory_order_relaxed); }

 private:
  struct Task {
    std::function<void()> run;
    bool control;  // an event's record or wait: runs even after an error, to pass it on
    std::unique_ptr<char> token;  // what orders the task after its push under TSan (.cpp)
  };
  void push(Task task);
  void loop(int threads);

  Device device_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  std::exception_ptr error_;  // written and read by the worker only
  std::atomic<uint64_t> synchronizations_{0};
  std::thread worker_;
};

// The simulated driver's page-locked host memory. Why: a GPU copies between its memory and
// page-locked host memory (cudaHostAlloc) asynchronously, but cudaMemcpyAsync through pageable
// memory is synchronous for the host (the driver stages it), so a step whose host buffers are
// pageable loses its overlap without any error. CUDA's driver keeps the pinned ranges for the
// whole process; so do these functions for the simulated device: SimPinnedAllocator registers
// its blocks, and the mover makes a copy through any other host memory synchronous (a counted
// host wait), so that CI's wait counts find it.
void sim_pin_host(const void* p, size_t bytes);
void sim_unpin_host(const void* p);
// Whether [p, p + bytes) lies in one registered block.
bool sim_host_is_pinned(const void* p, size_t bytes);

}  // namespace tide
