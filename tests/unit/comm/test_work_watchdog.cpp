// The watchdog of device calls (comm/work_watchdog.h): a hung call or a communicator's error
// aborts every registered communicator, then is reported, once; completed calls are dropped.
// End to end (the roll call's line, the job ended) under mpirun: tests/mpi/support.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tide/comm/local_process_group.h"
#include "tide/comm/sim_collective_group.h"
#include "tide/comm/work_watchdog.h"

using namespace tide;
using namespace std::chrono_literals;

namespace {

class FakeWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override {
    if (fail) throw std::runtime_error("an illegal memory access");
    return done;
  }
  std::atomic<bool> done{false}, fail{false};
};

// Records what the watchdog did, in order, and lets the test wait for its report.
struct Recorder {
  std::mutex mu;
  std::vector<std::string> events;
  std::promise<WorkWatchdog::Failure> failure;
  void add(std::string e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(std::move(e));
  }
  WorkWatchdog::OnFailure on_failure() {
    return [this](const WorkWatchdog::Failure& f) {
      add("report");
      failure.set_value(f);
    };
  }
};

// A group that is only a watchdog link: the ranks {0, 2} of a world of 4.
class LinkedGroup final : public ProcessGroup {
 public:
  explicit LinkedGroup(std::shared_ptr<WorkWatchdog> dog) : dog_(std::move(dog)) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "link"; }
  WorkPtr all_reduce_async(Tensor, ReduceOp) override { return nullptr; }
  WorkPtr reduce_scatter_async(Tensor, Tensor, ReduceOp) override { return nullptr; }
  WorkPtr all_gather_async(Tensor, Tensor) override { return nullptr; }
  WorkPtr broadcast_async(Tensor, int) override { return nullptr; }
  WorkPtr send_async(Tensor, int, int) override { return nullptr; }
  WorkPtr recv_async(Tensor, int, int) override { return nullptr; }
  WorkPtr barrier_async() override { return nullptr; }
  std::shared_ptr<ProcessGroup> split(int, int) override { return nullptr; }
  WatchdogLink watchdog_link() override { return {dog_, {0, 2}, 4}; }

 private:
  std::shared_ptr<WorkWatchdog> dog_;
};

}  // namespace

TEST(WorkWatchdog, CompletedCallsAreDroppedAndNeverReported) {
  Recorder rec;
  WorkWatchdog dog([] { return 0.3; }, rec.on_failure(), 10ms);
  auto aborts = dog.add_communicator([&] { rec.add("abort"); });
  for (int i = 0; i < 5; ++i) {
    auto w = std::make_shared<FakeWork>();
    dog.watch(w, "all_reduce");
    std::this_thread::sleep_for(20ms);
    w->done = true;
  }
  std::this_thread::sleep_for(500ms);  // past the timeout of every call
  EXPECT_EQ(dog.watched(), 0u);
  EXPECT_FALSE(dog.fired());
  EXPECT_TRUE(rec.events.empty());
}

TEST(WorkWatchdog, AHungCallAbortsEveryCommunicatorThenIsReportedOnce) {
  Recorder rec;
  WorkWatchdog dog([] { return 0.2; }, rec.on_failure(), 10ms);
  auto a = dog.add_communicator([&] { rec.add("abort a"); });
  auto gone = dog.add_communicator([&] { rec.add("abort gone"); });
  auto b = dog.add_communicator([&] { rec.add("abort b"); }, [] { return std::string(); });
  gone.reset();  // a group destroyed before the hang is not touched
  auto done = std::make_shared<FakeWork>(), hung = std::make_shared<FakeWork>();
  done->done = true;
  dog.watch(done, "broadcast");
  const auto t0 = std::chrono::steady_clock::now();
  dog.watch(hung, "all_reduce of 64 B on sim:0");
  auto report = rec.failure.get_future();
  ASSERT_EQ(report.wait_for(5s), std::future_status::ready) << "the watchdog never fired";
  const WorkWatchdog::Failure f = report.get();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(f.what, "all_reduce of 64 B on sim:0");
  EXPECT_TRUE(f.error.empty()) << f.error;
  EXPECT_GT(f.waited_s, 0.2);
  EXPECT_LE(f.waited_s, elapsed);
  std::this_thread::sleep_for(100ms);  // it fires once: nothing more happens
  EXPECT_TRUE(dog.fired());
  const std::vector<std::string> want = {"abort a", "abort b", "report"};
  EXPECT_EQ(rec.events, want);
}

TEST(WorkWatchdog, ACommunicatorErrorOrAFailedQueryIsReported) {
  {
    Recorder rec;
    std::atomic<bool> broken{false};
    WorkWatchdog dog([] { return 100.0; }, rec.on_failure(), 10ms);
    auto c = dog.add_communicator(
        [&] { rec.add("abort"); },
        [&] {
          return broken ? std::string("NCCL reported remote process exited") : std::string();
        });
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(dog.fired());
    broken = true;
    auto report = rec.failure.get_future();
    ASSERT_EQ(report.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(report.get().error, "NCCL reported remote process exited");
    EXPECT_EQ(rec.events, (std::vector<std::string>{"abort", "report"}));
  }
  Recorder rec;
  WorkWatchdog dog([] { return 100.0; }, rec.on_failure(), 10ms);
  auto w = std::make_shared<FakeWork>();
  dog.watch(w, "all_gather of 1.0 KiB on cuda:0");
  w->fail = true;
  auto report = rec.failure.get_future();
  ASSERT_EQ(report.wait_for(5s), std::future_status::ready);
  const WorkWatchdog::Failure f = report.get();
  EXPECT_EQ(f.what, "all_gather of 1.0 KiB on cuda:0");
  EXPECT_EQ(f.error, "an illegal memory access");
}

// The device groups name their calls as MPI's are named, by world rank.
TEST(WorkWatchdog, DeviceCallsAreNamedByWorldRank) {
  // The name the watchdog reports for one hung call of a group of world ranks {0, 2} on cuda:1.
  auto name_of = [](const char* op, uint64_t bytes, int peer) {
    Recorder rec;
    auto dog = std::make_shared<WorkWatchdog>([] { return 0.01; }, rec.on_failure(), 5ms);
    LinkedGroup group(dog);
    const DeviceCallWatch watch = device_call_watch(group, Device::cuda(1));
    EXPECT_TRUE(watch.watch && watch.add_communicator);
    watch.watch(std::make_shared<FakeWork>(), op, bytes, peer);
    auto report = rec.failure.get_future();
    return report.wait_for(5s) == std::future_status::ready ? report.get().what : "(none)";
  };
  EXPECT_EQ(name_of("all_reduce", 3 << 20, -1),
            "all_reduce of 3.0 MiB on cuda:1 in the group of ranks 0, 2");
  EXPECT_EQ(name_of("recv", 64, 1), "recv of 64 B from rank 2 (rank 1 of a group of 2) on cuda:1");
  EXPECT_EQ(name_of("send", 64, 1), "send of 64 B to rank 2 (rank 1 of a group of 2) on cuda:1");
  EXPECT_EQ(name_of("broadcast", 8, 0),
            "broadcast of 8 B from rank 0 on cuda:1 in the group of ranks 0, 2");
  EXPECT_EQ(name_of("barrier", 0, -1), "barrier on cuda:1 in the group of ranks 0, 2");
  // An unwatched group (one process, no MPI) gets no functions.
  LinkedGroup alone(nullptr);
  EXPECT_FALSE(device_call_watch(alone, Device::cuda(0)).watch);
}

// The watchdog polls every device call: one whose post a failed stream skipped (a kernel's
// error before it, sticky as CUDA's) is complete, and its wait rethrows the error (it crashed
// the poll, reading the skipped post's Work).
TEST(WorkWatchdog, ACallAfterAStreamErrorIsCompleteAndRethrows) {
  auto compute = std::make_shared<SimStream>(Device::sim(0), 1);
  SimCollectiveGroup group(std::make_shared<LocalProcessGroup>(), compute);
  compute->enqueue([] { throw std::runtime_error("token id out of range"); });
  std::vector<float> x(4, 1.0f);
  WorkPtr w =
      group.all_reduce_async(Tensor(x.data(), {4}, DType::F32, Device::sim(0)), ReduceOp::Sum);
  for (int i = 0; i < 500 && !w->is_completed(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(w->is_completed());
  EXPECT_THROW(w->wait(), std::exception);
  EXPECT_THROW(compute->synchronize(), std::exception);
}
