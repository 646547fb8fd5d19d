// The mesh's groups on a device (comm/device_routed_group.h) with the simulated device's
// collectives (comm/sim_collective_group.h), on 2, 3, 4 and 8 ranks: host buffers go through
// MPI and device buffers through the device's group, which orders each call after the compute
// stream's queued work without the host waiting for it, as NCCL does on a GPU.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "mpi_test.h"
#include "tide/comm/device_routed_group.h"
#include "tide/comm/sim_collective_group.h"
#include "tide/comm/topology.h"
#include "tide/core/error.h"

using namespace tide;

namespace {

struct SimMesh {
  std::shared_ptr<SimStream> compute = std::make_shared<SimStream>(Device::sim(0), 1);
  std::shared_ptr<DeviceRoutedGroup> group;
  SimMesh() {
    group = std::make_shared<DeviceRoutedGroup>(
        mpi_test::world_ptr(), [s = compute](std::shared_ptr<ProcessGroup> bootstrap) {
          return std::make_shared<SimCollectiveGroup>(std::move(bootstrap), s);
        });
  }
};

Tensor on_sim(std::vector<float>& v) {
  return Tensor(v.data(), {static_cast<int64_t>(v.size())}, DType::F32, Device::sim(0));
}

// A kernel on the compute stream that writes `value` into x after a while: a collective that
// did not wait for the stream would read what was there before.
void write_late(SimStream& s, std::vector<float>& x, float value) {
  s.enqueue([&x, value] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (float& e : x) e = value;
  });
}

}  // namespace

TEST(DeviceRoutedGroup, DeviceCollectivesWaitForTheComputeStreamNotTheHost) {
  SimMesh m;
  const int N = m.group->size(), r = m.group->rank();
  EXPECT_EQ(m.group->backend(), "mpi+sim");
  std::vector<float> x(5, -1.0f);
  write_late(*m.compute, x, static_cast<float>(r + 1));
  WorkPtr w = m.group->all_reduce_async(on_sim(x), ReduceOp::Sum);  // no host wait before
  w->wait();
  for (float e : x) EXPECT_EQ(e, N * (N + 1) / 2.0f);

  // reduce_scatter then all_gather, each queued right behind the kernel that fills its input.
  std::vector<float> in(3 * N, 0.0f), part(3, 0.0f), whole(3 * N, 0.0f);
  write_late(*m.compute, in, 1.0f);
  m.group->reduce_scatter_async(on_sim(in), on_sim(part), ReduceOp::Avg)->wait();
  for (float e : part) EXPECT_EQ(e, 1.0f);
  write_late(*m.compute, part, static_cast<float>(r));
  m.group->all_gather_async(on_sim(part), on_sim(whole))->wait();
  for (int q = 0; q < N; ++q)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(whole[3 * q + i], static_cast<float>(q));
  m.compute->synchronize();
}

TEST(DeviceRoutedGroup, HostBuffersGoThroughTheHostGroupDeviceBuffersThroughTheDevices) {
  SimMesh m;
  const int N = m.group->size();
  std::vector<float> h(4, 1.0f), d(4, 1.0f);
  m.group->reset_counters();
  m.group->all_reduce(Tensor(h.data(), {4}), ReduceOp::Sum);
  EXPECT_EQ(m.group->host().counters().calls, 1u);
  EXPECT_EQ(m.group->device().counters().calls, 0u);
  m.group->all_reduce(on_sim(d), ReduceOp::Sum);
  EXPECT_EQ(m.group->host().counters().calls, 1u);
  EXPECT_EQ(m.group->device().counters().calls, 1u);
  EXPECT_EQ(h, std::vector<float>(4, static_cast<float>(N)));
  EXPECT_EQ(d, std::vector<float>(4, static_cast<float>(N)));
  // The group's counters are both groups' traffic.
  const CommCounters c = m.group->counters();
  EXPECT_EQ(c.calls, 2u);
  EXPECT_EQ(c.bytes_sent,
            m.group->host().counters().bytes_sent + m.group->device().counters().bytes_sent);
  EXPECT_GT(m.group->device().counters().bytes_sent, 0u);
  // A collective with one buffer on each side is refused, naming both.
  std::vector<float> out(4 * N);
  try {
    m.group->all_gather(on_sim(d), Tensor(out.data(), {4 * N}));
    ADD_FAILURE() << "mixed buffers were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sim:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

TEST(DeviceRoutedGroup, SplitGroupsRouteTooAndMessagesPairInAnyOrder) {
  SimMesh m;
  const int r = m.group->rank();
  auto pair = m.group->split(r / 2, r);  // {0,1} {2,3} ...; a last odd rank alone
  ASSERT_NE(pair, nullptr);
  EXPECT_EQ(pair->backend(), "mpi+sim");
  if (pair->size() < 2) return;
  // Both ranks post their receive before their send, on device buffers: the stand-in must not
  // hold a stream in a receive whose peer's send is queued behind that peer's own receive.
  const int peer = 1 - pair->rank();
  std::vector<float> mine(8, static_cast<float>(r)), theirs(8, -1.0f);
  WorkPtr rx = pair->recv_async(on_sim(theirs), peer, 0);
  WorkPtr tx = pair->send_async(on_sim(mine), peer, 0);
  rx->wait();
  tx->wait();
  const int other = r % 2 == 0 ? r + 1 : r - 1;
  EXPECT_EQ(theirs, std::vector<float>(8, static_cast<float>(other)));
}

// The trainer's tensor-parallel group is the mesh's split of its routed world (Topology over
// Trainer::mesh_world): its device buffers go through the device's group too (NCCL on a GPU),
// each call after the compute stream's work, and sum over the tp ranks only.
TEST(DeviceRoutedGroup, TheMeshsTensorParallelGroupRoutesItsDeviceBuffers) {
  SimMesh m;
  const int N = m.group->size(), r = m.group->rank();
  const int tp = N % 2 == 0 ? 2 : N;  // split off the world where N > 2, the world itself else
  const Topology mesh(m.group, MeshShape{tp, N / tp, 1});
  EXPECT_EQ(mesh.tp().backend(), "mpi+sim");
  std::vector<float> x(7, -1.0f);
  write_late(*m.compute, x, static_cast<float>(r + 1));
  mesh.tp().all_reduce_async(on_sim(x), ReduceOp::Sum)->wait();
  const int first = r - r % tp;  // tp ranks are contiguous (comm/topology.h)
  float expected = 0.0f;
  for (int q = first; q < first + tp; ++q) expected += static_cast<float>(q + 1);
  for (float e : x) EXPECT_EQ(e, expected);
}
