// The simulated asynchronous device (core/sim_device.h) and the mover (kernels/mover.h):
// streams run their work in order and later than the host asks, events order streams and the
// host, errors raised on a stream reach the host at its next wait, and the mover refuses
// memory its stream cannot reach. Host buffers are page-locked (SimPinnedAllocator) where a test
// needs its copies asynchronous: through pageable memory a copy returns only once done.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "error_of.h"
#include "tide/core/arena.h"
#include "tide/core/sim_device.h"
#include "tide/kernels/mover.h"
#include "tide/kernels/ops.h"

using namespace tide;
using tide::test::error_of;

namespace {

// A task that holds its stream for a while, so that work queued behind it is visibly late.
void stall(const OpContext& ctx, std::atomic<bool>& released) {
  ctx.sim->enqueue([&released] {
    while (!released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
}

// Host memory the stream copies to and from asynchronously: `n` floats of `value`.
class PinnedFloats {
 public:
  PinnedFloats(int64_t n, float value) : arena_("pinned", n * sizeof(float), &memory_) {
    tensor_ = arena_.alloc_tensor({n});
    std::fill_n(tensor_.f32(), n, value);
  }
  const Tensor& tensor() const { return tensor_; }
  std::vector<float> values() const { return {tensor_.f32(), tensor_.f32() + tensor_.numel()}; }

 private:
  SimPinnedAllocator memory_;
  Arena arena_;
  Tensor tensor_;
};

}  // namespace

TEST(SimDevice, OpsAreQueuedAndRunInOrder) {
  SimAllocator memory(Device::sim(0));
  const OpContext ctx = make_op_context(Device::sim(0), nullptr, 1);
  Arena arena("test", 3 * 64 * sizeof(float), &memory);
  const Tensor x = arena.alloc_tensor({64}), y = arena.alloc_tensor({64}),
               z = arena.alloc_tensor({64});
  EXPECT_EQ(x.device, Device::sim(0));
  const PinnedFloats in(64, 2.0f), out(64, -1.0f);
  std::atomic<bool> released{false};
  stall(ctx, released);
  copy(ctx, x, in.tensor());
  residual_forward(ctx, y, x, x);  // y = 4
  residual_forward(ctx, z, y, x);  // z = 6: needs y first
  copy(ctx, out.tensor(), z);
  const StreamEvent done = record_event(ctx);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(done.sim->done()) << "the stream ran past a task that had not finished";
  released = true;
  synchronize(done);
  for (float v : out.values()) ASSERT_EQ(v, 6.0f);
  EXPECT_EQ(ctx.sim->synchronizations(), 0u) << "a copy through page-locked memory waited";
}

// Stream b waits for an event of stream a: its read sees a's write, though a ran late.
TEST(SimDevice, EventsOrderStreams) {
  SimAllocator memory(Device::sim(0));
  const OpContext a = make_op_context(Device::sim(0), nullptr, 1);
  const OpContext b = make_op_context(Device::sim(0), nullptr, 1);
  ASSERT_NE(a.sim, b.sim);
  Arena arena("test", 2 * 256 * sizeof(float), &memory);
  const Tensor x = arena.alloc_tensor({256}), y = arena.alloc_tensor({256});
  const PinnedFloats in(256, 1.5f), out(256, 0.0f);
  std::atomic<bool> released{false};
  stall(a, released);
  copy(a, x, in.tensor());
  wait_event(b, record_event(a));
  gelu_forward(b, y, x);
  copy(b, out.tensor(), y);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  released = true;
  synchronize(b);
  std::vector<float> ref(256);
  gelu_forward(OpContext{}, Tensor(ref.data(), {256}), in.tensor());
  EXPECT_EQ(out.values(), ref);
}

// A kernel's error on the stream (a target outside the vocabulary) reaches the host at its
// next wait, with the kernel's message; the stream skips the work queued after it.
TEST(SimDevice, StreamErrorsAreStickyAndReachTheHost) {
  SimAllocator memory(Device::sim(0));
  const OpContext ctx = make_op_context(Device::sim(0), nullptr, 1);
  Arena arena("test", 4096, &memory);
  const Tensor losses = arena.alloc_tensor({2}), logits = arena.alloc_tensor({2, 5});
  const Tensor targets = arena.alloc_tensor({2}, DType::I32);
  PinnedFloats bad(2, 0.0f);
  const PinnedFloats marker(2, 7.0f);
  const Tensor bad_ids = bad.tensor();
  std::copy_n(std::vector<int32_t>{1, 9}.data(), 2, static_cast<int32_t*>(bad_ids.data));
  fill_zero(ctx, logits);
  copy(ctx, targets, Tensor(bad_ids.data, {2}, DType::I32));
  crossentropy_forward(ctx, losses, logits, targets);  // queued: no error yet
  copy(ctx, marker.tensor(), losses);                  // skipped after the error
  const std::string msg = error_of([&] { synchronize(ctx); });
  EXPECT_NE(msg.find("9"), std::string::npos) << msg;
  EXPECT_EQ(marker.values(), std::vector<float>(2, 7.0f));
  // The error is sticky: a later wait on the same stream reports it again.
  EXPECT_FALSE(error_of([&] { synchronize(ctx); }).empty());
}

TEST(SimDevice, MoverRefusesMemoryTheStreamCannotReach) {
  SimAllocator sim0(Device::sim(0)), sim1(Device::sim(1));
  const OpContext ctx = make_op_context(Device::sim(0), nullptr, 1);
  Arena a("a", 256, &sim0), b("b", 256, &sim1);
  const Tensor x = a.alloc_tensor({8}), y = b.alloc_tensor({8});
  const std::string msg = error_of([&] { copy(ctx, x, y); });
  EXPECT_NE(msg.find("tensor 'src' is on sim:1 but the stream belongs to sim:0"), std::string::npos)
      << msg;
  EXPECT_NE(error_of([&] { copy(ctx, x, a.alloc_tensor({4})); }).find("element count"),
            std::string::npos);
  // The host must not write device memory directly.
  EXPECT_NE(error_of([&] { a.zeros({4}); }).find("fill_zero"), std::string::npos);
  // An op on the simulated device needs a context with a stream.
  OpContext no_stream;
  no_stream.device = Device::sim(0);
  EXPECT_NE(error_of([&] { gelu_forward(no_stream, x, x); }).find("has no stream"),
            std::string::npos);
  synchronize(ctx);
}

// A copy between float dtypes converts as convert_elements does (rounded to nearest-even), on the
// CPU at once and on the simulated device on its stream; integers do not convert.
// A converting copy: on the host between host buffers, on a device between device buffers
// only (a kernel; CUDA's rule, which the simulated device keeps so that CI finds a converting
// copy through the host).
TEST(SimDevice, MoverCopiesConvertBetweenFloatDtypes) {
  std::vector<float> in(100);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 1.0f / 3.0f * static_cast<float>(i) - 7.1f;
  std::vector<uint16_t> want(in.size());
  convert_elements(in.data(), DType::F32, want.data(), DType::BF16, 100);
  SimAllocator memory(Device::sim(0));
  const OpContext sim = make_op_context(Device::sim(0), nullptr, 1);
  Arena arena("convert", 4096, &memory);
  const Tensor dev = arena.alloc_tensor({100}, DType::BF16), dev32 = arena.alloc_tensor({100});
  for (const OpContext& ctx : {OpContext{}, sim}) {
    std::vector<uint16_t> got(in.size());
    std::vector<float> back(in.size());
    const Tensor host_in(in.data(), {100}), host_back(back.data(), {100});
    if (ctx.device.is_cpu()) {
      const Tensor mid(got.data(), {100}, DType::BF16);
      copy(ctx, mid, host_in);    // f32 -> bf16
      copy(ctx, host_back, mid);  // bf16 -> f32 (exact)
    } else {
      copy(ctx, dev32, host_in);
      copy(ctx, dev, dev32);  // f32 -> bf16 on the device
      copy(ctx, dev32, dev);  // bf16 -> f32 (exact)
      copy(ctx, host_back, dev32);
    }
    synchronize(ctx);
    for (size_t i = 0; i < in.size(); ++i)
      EXPECT_EQ(back[i], bf16_to_f32(want[i])) << ctx.device.str() << " element " << i;
  }
  EXPECT_NE(error_of([&] {
              copy(sim, dev, Tensor(in.data(), {100}));
            }).find("copy: converting f32 to bf16 on sim:0 needs both tensors there"),
            std::string::npos);
  std::vector<int32_t> ints(100);
  EXPECT_NE(error_of([&] {
              copy(OpContext{}, Tensor(ints.data(), {100}, DType::I32), Tensor(in.data(), {100}));
            }).find("other than between f32, bf16 and f16"),
            std::string::npos);
}

// CUDA's rule, kept: a copy through pageable host memory (or between two host buffers) returns
// only once it is done, a host wait the stream counts; through page-locked memory it is queued.
TEST(SimDevice, CopiesThroughPageableMemoryWaitForTheStream) {
  SimAllocator memory(Device::sim(0));
  const OpContext ctx = make_op_context(Device::sim(0), nullptr, 1);
  Arena arena("test", 64 * sizeof(float), &memory);
  const Tensor x = arena.alloc_tensor({64});
  PinnedFloats pinned(64, 3.0f), other(64, 0.0f);
  std::vector<float> pageable(64, 0.0f);
  copy(ctx, x, pinned.tensor());
  copy(ctx, pinned.tensor(), x);
  EXPECT_EQ(ctx.sim->synchronizations(), 0u);
  std::atomic<bool> released{false};
  stall(ctx, released);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    released = true;
  });
  copy(ctx, Tensor(pageable.data(), {64}), x);  // returns after the stall and the copy
  EXPECT_TRUE(released.load());
  EXPECT_EQ(pageable, std::vector<float>(64, 3.0f)) << "the copy had not run when it returned";
  release.join();
  EXPECT_EQ(ctx.sim->synchronizations(), 1u);
  copy(ctx, x, Tensor(pageable.data(), {64}));
  copy(ctx, other.tensor(), pinned.tensor());  // host to host, both page-locked
  EXPECT_EQ(ctx.sim->synchronizations(), 3u);
  // A range is page-locked only inside one allocation.
  EXPECT_TRUE(sim_host_is_pinned(pinned.tensor().data, 64 * sizeof(float)));
  EXPECT_FALSE(sim_host_is_pinned(pinned.tensor().data, 64 * sizeof(float) + 1));
  EXPECT_FALSE(sim_host_is_pinned(pageable.data(), 4));
}

TEST(SimDevice, DevicesParse) {
  EXPECT_EQ(parse_device("sim"), Device::sim(0));
  EXPECT_EQ(parse_device("sim:3"), Device::sim(3));
  EXPECT_EQ(parse_device("cuda:2"), Device::cuda(2));
  EXPECT_EQ(Device::sim(3).str(), "sim:3");
  EXPECT_NE(error_of([] { parse_device("sim:x"); }).find("sim:N"), std::string::npos);
  EXPECT_NE(error_of([] { parse_device("cuda:"); }).find("cuda:N"), std::string::npos);
}

// The deliberately missing wait: the host reads a download before waiting for the stream.
// Disabled in the suite; sim.tsan_catches_missing_wait (scripts/tsan.sh) runs it under
// ThreadSanitizer and passes only when TSan reports the race, which shows that a wait left
// out anywhere in the orchestration would fail CI.
TEST(SimDeviceRace, DISABLED_HostReadsBeforeTheWait) {
  SimAllocator memory(Device::sim(0));
  const OpContext ctx = make_op_context(Device::sim(0), nullptr, 1);
  Arena arena("test", 1024 * sizeof(float), &memory);
  const Tensor x = arena.alloc_tensor({1024});
  const PinnedFloats out(1024, 0.0f);
  fill_zero(ctx, x);
  copy(ctx, out.tensor(), x);
  float sum = 0.0f;
  for (int i = 0; i < 1024; ++i) sum += out.tensor().f32()[i];  // no synchronize(ctx): the bug
  synchronize(ctx);
  EXPECT_EQ(sum, 0.0f);
}
