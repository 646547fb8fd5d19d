// The mesh's groups on a device (comm/device_routed_group.h) with the simulated device's
// collectives (comm/sim_collective_group.h), on 2, 3, 4 and 8 ranks: host buffers go through
// MPI and device buffers through the device's group, which orders each call after the compute
// stream's queued work without the host waiting for it, as NCCL does on a GPU.

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
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

std::string test_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
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

TEST(DeviceRoutedGroup, SplitGroupsRouteTooAndOneGroupPerDirectionPairsReceivesPostedFirst) {
  SimMesh m;
  const int r = m.group->rank();
  auto pair = m.group->split(r / 2, r);  // {0,1} {2,3} ...; a last odd rank alone
  ASSERT_NE(pair, nullptr);
  EXPECT_EQ(pair->backend(), "mpi+sim");
  if (pair->size() < 2) return;
  // Both ranks post their receive before their send, on device buffers. A receive holds its
  // group's stream until matched (as NCCL's), so each direction has its own group, as the
  // pipeline engine's message streams: its sender is rank 0.
  const int me = pair->rank();
  auto from_even = pair->split(0, me), from_odd = pair->split(0, 1 - me);
  ProcessGroup& in = me == 0 ? *from_odd : *from_even;
  ProcessGroup& out = me == 0 ? *from_even : *from_odd;
  std::vector<float> mine(8, static_cast<float>(r)), theirs(8, -1.0f);
  WorkPtr rx = in.recv_async(on_sim(theirs), 0, 0);
  WorkPtr tx = out.send_async(on_sim(mine), 1, 0);
  rx->wait();
  tx->wait();
  const int other = r % 2 == 0 ? r + 1 : r - 1;
  EXPECT_EQ(theirs, std::vector<float>(8, static_cast<float>(other)));
}

// A pipeline stage's message (pipeline_engine.cpp): a device buffer sent right behind the
// kernel that writes it, without a host wait, arrives with what the kernel wrote; messages
// between two ranks match in the order they were issued, untagged, as NCCL's.
TEST(DeviceRoutedGroup, DeviceMessagesWaitForTheComputeStreamAndMatchInIssueOrder) {
  SimMesh m;
  const int r = m.group->rank(), N = m.group->size();
  if (N % 2 == 1 && r == N - 1) return;  // a last odd rank has no partner
  const bool sender = r % 2 == 0;
  const int peer = sender ? r + 1 : r - 1;
  std::vector<float> a(6, -1.0f), b(6, -1.0f);
  if (sender) {
    write_late(*m.compute, a, 10.0f + r);
    write_late(*m.compute, b, 20.0f + r);
    WorkPtr first = m.group->send_async(on_sim(a), peer, 0);
    WorkPtr second = m.group->send_async(on_sim(b), peer, 0);
    first->wait();
    second->wait();
  } else {
    WorkPtr first = m.group->recv_async(on_sim(a), peer, 0);
    WorkPtr second = m.group->recv_async(on_sim(b), peer, 0);
    second->wait();
    first->wait();
    EXPECT_EQ(a, std::vector<float>(6, 10.0f + peer));
    EXPECT_EQ(b, std::vector<float>(6, 20.0f + peer));
  }
  m.compute->synchronize();
  // Tags: NCCL has none, nor has its stand-in.
  const std::string e = test_error_of([&] { m.group->send_async(on_sim(a), peer, 3); });
  EXPECT_NE(e.find("take no message tags"), std::string::npos) << e;
}

// NCCL's send or receive holds its stream until the peer's call matched it, so the next call
// of the group waits: the stand-in posts it only then (its counters count posted calls).
TEST(DeviceRoutedGroup, AReceiveHoldsUpTheGroupsNextCallUntilItsMessageArrives) {
  SimMesh m;
  const int r = m.group->rank();
  if (r > 1) return;
  std::vector<float> x(4, static_cast<float>(r)), y(4, -1.0f);
  if (r == 0) {
    m.group->device().reset_counters();
    WorkPtr rx = m.group->recv_async(on_sim(y), 1, 0);
    WorkPtr tx = m.group->send_async(on_sim(x), 1, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 1 sends at 300 ms
    EXPECT_EQ(m.group->device().counters().calls, 1u) << "the send was posted before the "
                                                         "receive ahead of it had matched";
    rx->wait();
    tx->wait();
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    m.group->send_async(on_sim(x), 0, 0)->wait();
    m.group->recv_async(on_sim(y), 0, 0)->wait();
  }
  EXPECT_EQ(y, std::vector<float>(4, static_cast<float>(1 - r)));
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
