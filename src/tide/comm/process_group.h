#pragma once
// ProcessGroup: the collectives tide needs, over a set of ranks.
//
//   all_reduce      buf (n)            -> every rank holds the sum (or mean) of all ranks' buf
//   reduce_scatter  in (N*k) -> out (k): rank r gets the reduced slice [r*k, (r+1)*k) of in
//   all_gather      in (k) -> out (N*k): slice r of out is rank r's in
//   broadcast       buf (n)            -> every rank holds root's buf
//   send / recv     point to point (pipeline stages), matched by (peer, tag)
//   barrier
//
// Each call has an asynchronous form returning a Work handle to wait on; the blocking form is
// the asynchronous one followed by wait(). Calls on one group must be issued in the same order
// on every rank of the group (as with MPI and NCCL); the buffers of an asynchronous call must stay
// alive and untouched until its Work completes.
//
// Every call adds to the group's byte counters: bytes this rank sent and received, so tests and
// benchmarks can compare traffic with theory (ZeRO: 2*Psi*(N-1)/N per rank for an all-reduce).
// Backends: LocalProcessGroup (one rank, no MPI), MpiProcessGroup (host buffers),
// NcclProcessGroup (device buffers). See docs/comm.md.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tide/core/stream_event.h"
#include "tide/core/tensor.h"

namespace tide {

class WorkWatchdog;

enum class ReduceOp : uint8_t { Sum, Avg };

// How the MPI backend implements all_reduce / reduce_scatter / all_gather: MPI's own collectives
// (`mpi`, counters record ring theory) or tide's explicit ring over send/recv (`ring`, counters
// record the messages sent). See mpi_process_group.h.
enum class CommAlgorithm : uint8_t { Mpi, Ring };
// Parses "mpi" or "ring"; throws naming both otherwise.
CommAlgorithm parse_comm_algorithm(const std::string& s);

// A pending communication. wait() blocks until it is done (and rethrows its error if it
// failed); is_completed() polls. Both may be called any number of times.
//
// wait_on(stream) orders the work queued on a CUDA stream (a cudaStream_t; nullptr is the
// legacy default stream) after this communication WITHOUT blocking the host: kernels queued on
// `stream` afterwards see its result. Device-side work (NCCL) enqueues a cudaStreamWaitEvent on
// an event recorded after the collective; the simulated device's (sim_collective_group.h) takes
// a SimStream* and queues the wait there. Host-side work (local, MPI) has nothing a stream can
// wait on, so there it is wait(): by the time it returns, the host buffers hold the result.
// (model/stream_collectives.h picks the call for an op context.)
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
  virtual void wait_on(void* stream) {
    (void)stream;
    wait();
  }
};
using WorkPtr = std::shared_ptr<Work>;

// Work that is already finished (local group, empty buffers).
class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

struct CommCounters {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t calls = 0;  // collectives and point-to-point calls issued
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "local", "mpi", "nccl"

  virtual WorkPtr all_reduce_async(Tensor buf, ReduceOp op = ReduceOp::Sum) = 0;
  virtual WorkPtr reduce_scatter_async(Tensor in, Tensor out, ReduceOp op = ReduceOp::Sum) = 0;
  virtual WorkPtr all_gather_async(Tensor in, Tensor out) = 0;
  virtual WorkPtr broadcast_async(Tensor buf, int root) = 0;
  virtual WorkPtr send_async(Tensor buf, int dst, int tag = 0) = 0;
  virtual WorkPtr recv_async(Tensor buf, int src, int tag = 0) = 0;
  virtual WorkPtr barrier_async() = 0;

  void all_reduce(Tensor buf, ReduceOp op = ReduceOp::Sum) { all_reduce_async(buf, op)->wait(); }
  void reduce_scatter(Tensor in, Tensor out, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_async(in, out, op)->wait();
  }
  void all_gather(Tensor in, Tensor out) { all_gather_async(in, out)->wait(); }
  void broadcast(Tensor buf, int root) { broadcast_async(buf, root)->wait(); }
  void send(Tensor buf, int dst, int tag = 0) { send_async(buf, dst, tag)->wait(); }
  void recv(Tensor buf, int src, int tag = 0) { recv_async(buf, src, tag)->wait(); }
  void barrier() { barrier_async()->wait(); }

  // Collective over this group (every rank must call it): ranks with the same color form a new
  // group, ordered by key (ties by rank). A negative color means "not in any new group": that
  // rank gets nullptr. Same contract as MPI_Comm_split.
  virtual std::shared_ptr<ProcessGroup> split(int color, int key) = 0;
  // Collective over this group: a new group of the listed ranks (ranks of this group), in that
  // order. Ranks not listed get nullptr.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

  // The watchdog (MPI backend; a no-op elsewhere): every wait on this process's communication
  // gives up after `seconds` and ends the job with a message naming the operation, the step
  // set here and the ranks that did not arrive (see comm/watchdog.h).
  virtual void set_timeout(double seconds) { (void)seconds; }
  virtual void set_step(int64_t step) { (void)step; }
  // What a device group made over these ranks (NCCL, the simulated device's) needs to be
  // watched: the process's WorkWatchdog (comm/work_watchdog.h) and the world rank of each rank
  // here, which its messages name. Empty where nothing watches (one process, no MPI).
  struct WatchdogLink {
    std::shared_ptr<WorkWatchdog> watchdog;
    std::vector<int> world_ranks;
    int world_size = 1;
  };
  virtual WatchdogLink watchdog_link() { return {}; }
  // Whether a call on `buf` is ordered by the device's streams (NCCL, the simulated device's
  // group): it waits on the device for the compute stream's queued work, and a stream can wait
  // for its Work. false where the host runs the call (local, MPI), reading `buf` at once.
  virtual bool orders_on_stream(const Tensor& buf) const {
    (void)buf;
    return false;
  }
  // Where calls are ordered by the device's streams: the calls issued from now on also wait, on
  // the device, for `event`, recorded on another stream of the device than the compute stream
  // (the copy stream, which wrote a buffer the next call sends). The host goes on at once.
  // Elsewhere an error: the host runs the call, so it waits for the event itself
  // (model/stream_collectives.h).
  virtual void wait_on_device(const StreamEvent& event);

  // Virtual for groups that delegate their calls to others (device_routed_group.h).
  virtual CommCounters counters() const {
    return {bytes_sent_.load(), bytes_received_.load(), calls_.load()};
  }
  virtual void reset_counters() {
    bytes_sent_ = 0;
    bytes_received_ = 0;
    calls_ = 0;
  }

 protected:
  void count_call(uint64_t sent, uint64_t received) {
    bytes_sent_ += sent;
    bytes_received_ += received;
    calls_ += 1;
  }
  // For backends that measure sends one message at a time (the ring algorithm).
  void count_bytes(uint64_t sent, uint64_t received) {
    bytes_sent_ += sent;
    bytes_received_ += received;
  }
  void count_only_call() { calls_ += 1; }

 private:
  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0}, calls_{0};
};

// Smallest multiple of `world` that is >= n: the padded length of a buffer that is to be
// reduce-scattered or all-gathered over `world` ranks (pad with zeros, ignore the tail).
inline int64_t padded_numel(int64_t n, int world) {
  return (n + world - 1) / world * world;
}

// Argument checks shared by all backends, so every backend rejects bad input with the same
// message. `who` names the call in the message ("all_reduce").
namespace comm_check {
void same_dtype_device(const Tensor& a, const Tensor& b, const char* who);
void reduce_scatter_sizes(const Tensor& in, const Tensor& out, int world);
void all_gather_sizes(const Tensor& in, const Tensor& out, int world);
void peer(int peer, int world, int self, const char* who);
void root(int root, int world);
void tag(int tag);
void split_args(int color, int key);
}  // namespace comm_check

}  // namespace tide
