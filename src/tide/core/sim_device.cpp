#include "tide/core/sim_device.h"

#include <omp.h>

#include <cstdint>
#include <map>
#include <utility>

// Under ThreadSanitizer a stream's queue must not order more than the stream orders. Its mutex
// would: a worker popping a task acquires everything the host did before its LAST push, so a
// host read placed after a copy's enqueue, and before the next enqueue, would look ordered
// before the copy whenever the worker ran late, and the missing wait would go unreported. So
// TSan is told to ignore the queue's locking and accesses, and each task carries exactly the
// host's state at its own push: released on the task's token when queued, acquired when run.
#if defined(__SANITIZE_THREAD__)
#define TIDE_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TIDE_UNDER_TSAN 1
#endif
#endif

#ifdef TIDE_UNDER_TSAN
extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void AnnotateIgnoreSyncBegin(const char* file, int line);
void AnnotateIgnoreSyncEnd(const char* file, int line);
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#endif

namespace tide {

namespace {

// The queue's critical sections, invisible to TSan (see above); nothing elsewhere.
struct HiddenFromTsan {
#ifdef TIDE_UNDER_TSAN
  HiddenFromTsan() {
    AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~HiddenFromTsan() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
  }
#endif
};

void release_token([[maybe_unused]] char* token) {
#ifdef TIDE_UNDER_TSAN
  __tsan_release(token);
#endif
}

void acquire_token([[maybe_unused]] char* token) {
#ifdef TIDE_UNDER_TSAN
  __tsan_acquire(token);
#endif
}

}  // namespace

void SimEvent::set(std::exception_ptr error) {
  {
    std::lock_guard lock(m_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

void SimEvent::wait() const {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool SimEvent::done() const {
  std::lock_guard lock(m_);
  return done_;
}

SimStream::SimStream(Device device, int threads)
    : device_(device), worker_([this, threads] { loop(threads); }) {}

SimStream::~SimStream() {
  {
    [[maybe_unused]] const HiddenFromTsan hidden;
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void SimStream::push(Task task) {
  task.token = std::make_unique<char>();
  release_token(task.token.get());
  {
    [[maybe_unused]] const HiddenFromTsan hidden;
    std::lock_guard lock(m_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void SimStream::enqueue(std::function<void()> task) {
  push({std::move(task), false, nullptr});
}

std::shared_ptr<SimEvent> SimStream::record() {
  auto event = std::make_shared<SimEvent>();
  // The stream's sticky error travels with the event; `error_` is the worker's, so read it there.
  push({[this, event] { event->set(error_); }, true, nullptr});
  return event;
}

void SimStream::wait(std::shared_ptr<const SimEvent> event) {
  // Waiting on an event of a failed stream makes this stream fail too (the wait rethrows).
  push({[event = std::move(event)] { event->wait(); }, true, nullptr});
}

void SimStream::synchronize() {
  synchronizations_.fetch_add(1, std::memory_order_relaxed);
  record()->wait();
}

void SimStream::loop(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
  for (;;) {
    Task task;
    {
      [[maybe_unused]] const HiddenFromTsan hidden;
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    acquire_token(task.token.get());
    if (error_ && !task.control) continue;  // a failed stream skips its work, as CUDA's does
    try {
      task.run();
    } catch (...) {
      if (!error_) error_ = std::current_exception();
    }
  }
}

namespace {

struct PinnedRanges {
  std::mutex m;
  std::map<uintptr_t, size_t> blocks;  // start -> bytes
};

PinnedRanges& pinned_ranges() {
  static PinnedRanges ranges;  // the process's, as the driver's are
  return ranges;
}

}  // namespace

void sim_pin_host(const void* p, size_t bytes) {
  PinnedRanges& r = pinned_ranges();
  std::lock_guard lock(r.m);
  r.blocks[reinterpret_cast<uintptr_t>(p)] = bytes;
}

void sim_unpin_host(const void* p) {
  PinnedRanges& r = pinned_ranges();
  std::lock_guard lock(r.m);
  r.blocks.erase(reinterpret_cast<uintptr_t>(p));
}

bool sim_host_is_pinned(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  PinnedRanges& r = pinned_ranges();
  std::lock_guard lock(r.m);
  auto it = r.blocks.upper_bound(a);  // the first block starting after p
  if (it == r.blocks.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}

}  // namespace tide
