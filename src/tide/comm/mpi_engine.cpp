#include "tide/comm/mpi_engine.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "tide/comm/watchdog.h"
#include "tide/core/dtype.h"

namespace tide {

void MpiWork::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  const double timeout = engine_->timeout();
  const auto t0 = std::chrono::steady_clock::now();
  if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout), [&] { return done_; })) {
    lock.unlock();
    engine_->on_timeout(
        what_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (error_) std::rethrow_exception(error_);
}

bool MpiWork::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void MpiWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = error;
  }
  cv_.notify_all();
}

namespace {
// MPI_Op_create's functions: inout[i] = in[i] + inout[i] over MPI_UINT16_T elements.
void mpi_bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  add_elements(DType::BF16, inout, in, inout, *len);
}
void mpi_f16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  add_elements(DType::F16, inout, in, inout, *len);
}
}  // namespace

MpiEngine::MpiEngine() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  TIDE_CHECK(!initialized,
             "MPI was initialised outside tide; let init_distributed() initialise it");
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  TIDE_CHECK(provided >= MPI_THREAD_SERIALIZED,
             "this MPI library provides thread level {} but tide's communication thread needs "
             "MPI_THREAD_SERIALIZED ({}); use an MPI built with thread support (OpenMPI does)",
             provided, MPI_THREAD_SERIALIZED);
  thread_level_ = provided;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  MPI_Comm_dup(MPI_COMM_WORLD, &watchdog_comm_);
  thread_ = std::thread([this] { loop(); });
  run(
      [this] {
        MPI_Op_create(&mpi_bf16_sum, /*commute=*/1, &bf16_sum_);
        MPI_Op_create(&mpi_f16_sum, /*commute=*/1, &f16_sum_);
      },
      "MPI_Op_create");
}

MpiEngine::~MpiEngine() {
  work_watchdog_.reset();  // its thread may call MPI (the roll call): stopped first
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {  // the engine thread has stopped: this thread makes the last calls
    MPI_Op_free(&bf16_sum_);
    MPI_Op_free(&f16_sum_);
    MPI_Comm_free(&watchdog_comm_);
    MPI_Finalize();
  }
}

MPI_Op MpiEngine::sum_op(DType t) const {
  switch (t) {
    case DType::F32:
      return MPI_SUM;
    case DType::BF16:
      return bf16_sum_;
    case DType::F16:
      return f16_sum_;
    default:
      TIDE_FAIL("MPI sums f32, bf16 and f16, not {}", dtype_name(t));
  }
}

void MpiEngine::set_timeout(double seconds) {
  TIDE_CHECK(seconds > 0, "comm.timeout_s must be positive (got {})", seconds);
  timeout_s_ = seconds;
}

void MpiEngine::on_timeout(const std::string& what, double waited_s) {
  // One report per process: a second thread timing out waits for the abort.
  static std::atomic<bool> reporting{false};
  if (reporting.exchange(true))
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  // The job is ending: the SIGTERM that mpirun sends with the abort must not be taken for a
  // polite stop request (tide train's handlers, train/preemption.h).
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  const WatchdogNote self{world_rank_, step_.load(), waited_s, what};
  std::vector<WatchdogNote> answered;
  // The roll call runs on this thread beside the engine thread (which may be inside MPI_Test
  // or a blocking setup call): that needs MPI_THREAD_MULTIPLE.
  if (thread_level_ >= MPI_THREAD_MULTIPLE && world_size_ > 1)
    answered = watchdog_roll_call(watchdog_comm_, self, std::clamp(timeout() / 2, 1.0, 30.0));
  int reporter = world_rank_;
  for (const WatchdogNote& n : answered) reporter = std::min(reporter, n.rank);
  std::fflush(stdout);
  if (reporter == world_rank_) {
    const std::string line = watchdog_message(self, answered, world_size_, timeout());
    std::fprintf(stderr, "tide: error: %s\n", line.c_str());
    std::fflush(stderr);
  } else {
    // The lowest answering rank reports for everyone; give its line time to get out.
    std::this_thread::sleep_for(std::chrono::seconds(3));
  }
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // not reached
}

std::shared_ptr<WorkWatchdog> MpiEngine::work_watchdog() {
  std::lock_guard<std::mutex> lock(work_watchdog_mu_);
  if (!work_watchdog_)
    work_watchdog_ = std::make_shared<WorkWatchdog>(
        [this] { return timeout(); },
        [this](const WorkWatchdog::Failure& f) {
          if (f.error.empty()) on_timeout(f.what, f.waited_s);
          std::fflush(stdout);
          std::fprintf(stderr, "tide: error: rank %d: communication failed%s%s: %s\n", world_rank_,
                       f.what.empty() ? "" : " in ", f.what.c_str(), f.error.c_str());
          std::fflush(stderr);
          MPI_Abort(MPI_COMM_WORLD, 1);
        });
  return work_watchdog_;
}

std::shared_ptr<MpiWork> MpiEngine::submit(std::unique_ptr<MpiOp> op, std::string what) {
  auto work = std::make_shared<MpiWork>(this, std::move(what));
  {
    std::lock_guard<std::mutex> lock(mu_);
    TIDE_ASSERT(!stop_);
    queue_.push_back({std::move(op), work});
  }
  cv_.notify_all();
  return work;
}

namespace {
// An op that runs one function to completion when started.
class FunctionOp final : public MpiOp {
 public:
  explicit FunctionOp(std::function<void()> fn) : fn_(std::move(fn)) {}
  void start() override { fn_(); }
  bool progress() override { return true; }

 private:
  std::function<void()> fn_;
};
}  // namespace

void MpiEngine::run(std::function<void()> fn, std::string what) {
  submit(std::make_unique<FunctionOp>(std::move(fn)), std::move(what))->wait();
}

void MpiEngine::loop() {
  std::vector<Pending> active;
  auto last_advance = std::chrono::steady_clock::now();
  for (;;) {
    std::deque<Pending> fresh;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (active.empty()) cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty() && active.empty()) return;
      fresh.swap(queue_);
    }
    // Start new ops in submission order, so every rank starts a group's collectives in the
    // same order (MPI requires it for non-blocking collectives).
    for (Pending& p : fresh) {
      try {
        p.op->start();
        active.push_back(std::move(p));
      } catch (...) {
        p.work->finish(std::current_exception());
      }
    }
    bool advanced = !fresh.empty();
    for (size_t i = 0; i < active.size();) {
      bool finished = false;
      std::exception_ptr error;
      try {
        finished = active[i].op->progress();
      } catch (...) {
        finished = true;
        error = std::current_exception();
      }
      if (finished) {
        active[i].work->finish(error);
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
        advanced = true;
      } else {
        ++i;
      }
    }
    // Back off while waiting on peers: yield for the first millisecond without a completion
    // (a large message needs many polls in a row to move its fragments through shared memory),
    // then sleep briefly so that a rank waiting long for a slow peer does not burn a core that
    // compute threads (or oversubscribed ranks) need.
    const auto now = std::chrono::steady_clock::now();
    if (advanced) last_advance = now;
    if (now - last_advance > std::chrono::milliseconds(1))
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    else if (!advanced)
      std::this_thread::yield();
  }
}

std::shared_ptr<MpiEngine> mpi_engine() {
  static std::mutex mu;
  static std::shared_ptr<MpiEngine> engine;
  std::lock_guard<std::mutex> lock(mu);
  if (!engine) engine = std::make_shared<MpiEngine>();
  return engine;
}

int mpi_count(int64_t n, const char* who) {
  TIDE_CHECK(n <= INT_MAX,
             "{}: {} elements exceed MPI's count limit of {}; split the buffer into buckets", who,
             n, INT_MAX);
  return static_cast<int>(n);
}

}  // namespace tide
