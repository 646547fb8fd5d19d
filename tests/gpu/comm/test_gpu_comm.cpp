// The NCCL backend on device buffers. On one GPU (world size 1) the collectives are identities,
// which still checks that the NCCL communicator, the comm stream, the events and the dtype
// handling work; under mpirun with one GPU per rank the sums are checked for real.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tide/comm/distributed.h"
#include "tide/comm/local_process_group.h"
#include "tide/comm/nccl_process_group.h"
#include "tide/comm/ring_traffic.h"

using namespace tide;

namespace {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p_, bytes), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p_); }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

template <class T>
void upload(const DeviceBuffer& d, const std::vector<T>& h) {
  ASSERT_EQ(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
}
template <class T>
std::vector<T> download(const DeviceBuffer& d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

class Nccl : public testing::Test {
 protected:
  void SetUp() override {
    if (!nccl_available() || !cuda_available()) GTEST_SKIP() << "no GPU or no NCCL";
    static std::shared_ptr<ProcessGroup> world = init_distributed();
    static std::shared_ptr<ProcessGroup> nccl;
    int devices = 0;
    cudaGetDeviceCount(&devices);
    if (!nccl) nccl = make_nccl_process_group(world, world->rank() % devices);
    g_ = nccl.get();
    g_->reset_counters();
    dev_ = Device::cuda(world->rank() % devices);
  }
  ProcessGroup* g_ = nullptr;
  Device dev_;
};

}  // namespace

TEST_F(Nccl, AllReduceSumAndAvgF32AndBf16) {
  const int N = g_->size(), r = g_->rank();
  const int64_t n = 1001;
  std::vector<float> h(n);
  for (int64_t i = 0; i < n; ++i) h[i] = static_cast<float>(r + i % 7);
  DeviceBuffer d(n * 4);
  upload(d, h);
  g_->all_reduce(Tensor(d.get(), {n}, DType::F32, dev_), ReduceOp::Sum);
  std::vector<float> got = download<float>(d, n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(got[i], static_cast<float>(N * (N - 1) / 2 + N * (i % 7)));
  upload(d, h);
  WorkPtr w = g_->all_reduce_async(Tensor(d.get(), {n}, DType::F32, dev_), ReduceOp::Avg);
  w->wait();
  EXPECT_TRUE(w->is_completed());
  got = download<float>(d, n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_FLOAT_EQ(got[i], static_cast<float>(N * (N - 1) / 2 + N * (i % 7)) / N);
  std::vector<uint16_t> hb(n);
  for (int64_t i = 0; i < n; ++i) hb[i] = f32_to_bf16(static_cast<float>(i % 7));
  DeviceBuffer db(n * 2);
  upload(db, hb);
  g_->all_reduce(Tensor(db.get(), {n}, DType::BF16, dev_));
  std::vector<uint16_t> gb = download<uint16_t>(db, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bf16_to_f32(gb[i]), static_cast<float>(N * (i % 7)));
  // Counters record ring theory: 2n(N-1)/N elements per call (0 on one rank).
  EXPECT_EQ(g_->counters().calls, 3u);
  EXPECT_EQ(g_->counters().bytes_sent,
            static_cast<uint64_t>(ring_all_reduce_traffic(n, N, r).sent * (4 + 4 + 2)));
}

TEST_F(Nccl, ReduceScatterAllGatherBroadcast) {
  const int N = g_->size(), r = g_->rank();
  const int64_t k = 4;
  std::vector<float> h(N * k);
  for (int64_t j = 0; j < N * k; ++j) h[j] = static_cast<float>(r + j);
  DeviceBuffer in(N * k * 4), out(k * 4), full(N * k * 4);
  upload(in, h);
  g_->reduce_scatter(Tensor(in.get(), {N * k}, DType::F32, dev_),
                     Tensor(out.get(), {k}, DType::F32, dev_));
  std::vector<float> got = download<float>(out, k);
  for (int64_t i = 0; i < k; ++i)
    EXPECT_EQ(got[i], static_cast<float>(N * (N - 1) / 2 + N * (r * k + i)));
  g_->all_gather(Tensor(out.get(), {k}, DType::F32, dev_),
                 Tensor(full.get(), {N * k}, DType::F32, dev_));
  got = download<float>(full, N * k);
  for (int64_t j = 0; j < N * k; ++j)
    EXPECT_EQ(got[j], static_cast<float>(N * (N - 1) / 2 + N * j));
  upload(out, std::vector<float>(k, static_cast<float>(r)));
  g_->broadcast(Tensor(out.get(), {k}, DType::F32, dev_), 0);
  EXPECT_EQ(download<float>(out, k), std::vector<float>(k, 0.0f));
  g_->barrier();
}

TEST_F(Nccl, SplitMakesANewCommunicator) {
  auto sub = g_->split(0, g_->rank());
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->backend(), "nccl");
  EXPECT_EQ(sub->size(), g_->size());
  DeviceBuffer d(4);
  upload(d, std::vector<float>{1.0f});
  sub->all_reduce(Tensor(d.get(), {1}, DType::F32, dev_));
  EXPECT_EQ(download<float>(d, 1)[0], static_cast<float>(g_->size()));
}

TEST_F(Nccl, HostBuffersAndTagsAreRejectedClearly) {
  std::vector<float> h(4);
  try {
    g_->all_reduce(Tensor(h.data(), {4}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host buffers go through the MPI backend"),
              std::string::npos)
        << e.what();
  }
  DeviceBuffer d(16);
  EXPECT_THROW(g_->all_reduce(Tensor(d.get(), {4}, DType::I32, dev_)), Error);
}

// wait_on(stream): a compute stream waits for the collective on the device, the host does not.
// A copy queued on that stream after wait_on reads the reduced values.
TEST_F(Nccl, WaitOnMakesAComputeStreamWaitForTheCollective) {
  const int N = g_->size(), r = g_->rank();
  const int64_t n = 1 << 20;  // large enough that the collective is not over at once
  std::vector<float> h(n);
  for (int64_t i = 0; i < n; ++i) h[i] = static_cast<float>(r + i % 5);
  DeviceBuffer d(n * 4);
  upload(d, h);
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  WorkPtr w = g_->all_reduce_async(Tensor(d.get(), {n}, DType::F32, dev_), ReduceOp::Sum);
  w->wait_on(compute);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d.get(), n * sizeof(float), cudaMemcpyDeviceToHost, compute),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(pinned[i], static_cast<float>(N * (N - 1) / 2 + N * (i % 5))) << i;
  EXPECT_TRUE(w->is_completed());
  cudaFreeHost(pinned);
  cudaStreamDestroy(compute);
}

// One GPU without mpirun or NCCL (tide train device=cuda at one rank with ZeRO, offload or auto
// placement): the local group's reduce_scatter and all_gather are device copies, finished when
// the call returns. A host buffer on one side is refused with the rule every group keeps (input
// and output on one device), before anything is copied.
TEST(LocalGroupOnAGpu, CollectivesCopyDeviceBuffers) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  const Device dev = Device::cuda(0);
  const int64_t k = 1000;
  std::vector<float> h(k);
  for (int64_t i = 0; i < k; ++i) h[i] = 0.5f * static_cast<float>(i) - 3.0f;
  DeviceBuffer a(k * 4), b(k * 4);
  upload(a, h);
  LocalProcessGroup g;
  g.reduce_scatter(Tensor(a.get(), {k}, DType::F32, dev), Tensor(b.get(), {k}, DType::F32, dev));
  EXPECT_EQ(download<float>(b, k), h);
  upload(a, std::vector<float>(k, 0.0f));
  g.all_gather(Tensor(b.get(), {k}, DType::F32, dev), Tensor(a.get(), {k}, DType::F32, dev));
  EXPECT_EQ(download<float>(a, k), h);
  std::vector<float> back(k, 0.0f);
  try {
    g.all_gather(Tensor(a.get(), {k}, DType::F32, dev), Tensor(back.data(), {k}, DType::F32));
    ADD_FAILURE() << "a host output beside a device input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("put both on the same device"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(back, std::vector<float>(k, 0.0f));
}
