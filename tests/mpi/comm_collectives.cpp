// Every collective on every world size (run under mpirun -np 2, 3, 4, 8), with both algorithms:
// MPI's own collectives and tide's explicit ring. Values are small integers, so sums and means
// are exact in f32 and results can be compared with ==. bf16 and f16 reductions are checked bit
// for bit too, their one rounding case included.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "error_of.h"
#include "mpi_test.h"
#include "tide/comm/ring_traffic.h"

using namespace tide;
using tide::test::error_of;

// Outside the anonymous namespace: the TEST_P classes derive from it (-Wsubobject-linkage).
class Collectives : public testing::TestWithParam<CommAlgorithm> {
 protected:
  ProcessGroup& g() { return mpi_test::world(GetParam()); }
  int rank() { return g().rank(); }
  int world() { return g().size(); }
};

namespace {

Tensor f32(std::vector<float>& v) {
  return Tensor(v.data(), {static_cast<int64_t>(v.size())});
}

std::string algo_name(const testing::TestParamInfo<CommAlgorithm>& p) {
  return p.param == CommAlgorithm::Ring ? "ring" : "mpi";
}

// Counter deltas over one call.
struct Delta {
  explicit Delta(ProcessGroup& g) : g_(g), before_(g.counters()) {}
  uint64_t sent() const { return g_.counters().bytes_sent - before_.bytes_sent; }
  uint64_t received() const { return g_.counters().bytes_received - before_.bytes_received; }
  ProcessGroup& g_;
  CommCounters before_;
};

}  // namespace

TEST_P(Collectives, AllReduceSumAndAvgOnAnySize) {
  const int N = world(), r = rank();
  // Sizes below N (empty chunks), not divisible by N, and divisible.
  for (int64_t n : {int64_t{1}, int64_t{N - 1}, int64_t{7}, int64_t{3 * N + 1}, int64_t{1000}}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(100 * r + i % 50);
      Delta d(g());
      g().all_reduce(f32(x), op);
      for (int64_t i = 0; i < n; ++i) {
        const float sum = static_cast<float>(100 * N * (N - 1) / 2 + N * (i % 50));
        const float want = op == ReduceOp::Sum ? sum : sum / static_cast<float>(N);
        ASSERT_EQ(x[i], want) << "n=" << n << " i=" << i;
      }
      // Counted traffic is the ring's: measured message by message for algorithm=ring, the
      // formula for algorithm=mpi. Equal in both cases, uneven sizes included.
      const RingTraffic t = ring_all_reduce_traffic(n, N, r);
      EXPECT_EQ(d.sent(), static_cast<uint64_t>(t.sent) * 4) << "n=" << n;
      EXPECT_EQ(d.received(), static_cast<uint64_t>(t.received) * 4) << "n=" << n;
    }
  }
}

// MPI work lives on the host: wait_on(stream) waits like wait(), and the result is there.
TEST_P(Collectives, WaitOnAStreamWaitsForTheResult) {
  const int N = world(), r = rank();
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r + i % 3);
  WorkPtr w = g().all_reduce_async(f32(x));
  w->wait_on(nullptr);
  EXPECT_TRUE(w->is_completed());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(x[i], static_cast<float>(N * (N - 1) / 2 + N * (i % 3))) << i;
}

TEST_P(Collectives, AllReduceTrafficIsTwoNTimesNMinusOneOverN) {
  // The number the data-parallel benchmark compares with: 2*Psi*(N-1)/N per rank.
  const int N = world();
  const int64_t n = 60 * 7 * 8;  // divisible by 2, 3, 4, 8
  std::vector<float> x(n, 1.0f);
  Delta d(g());
  g().all_reduce(f32(x));
  EXPECT_EQ(d.sent(), static_cast<uint64_t>(2 * n * (N - 1) / N * 4));
  EXPECT_EQ(d.received(), static_cast<uint64_t>(2 * n * (N - 1) / N * 4));
  EXPECT_EQ(x[0], static_cast<float>(N));
}

TEST_P(Collectives, ReduceScatterGivesEachRankItsReducedSlice) {
  const int N = world(), r = rank();
  for (int64_t k : {1, 5}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      std::vector<float> in(static_cast<size_t>(N * k)), out(static_cast<size_t>(k), -1.0f);
      for (int64_t j = 0; j < N * k; ++j) in[j] = static_cast<float>(10 * r + j);
      const std::vector<float> in_copy = in;
      Delta d(g());
      g().reduce_scatter(f32(in), f32(out), op);
      for (int64_t i = 0; i < k; ++i) {
        const float sum = static_cast<float>(10 * N * (N - 1) / 2 + N * (r * k + i));
        ASSERT_EQ(out[i], op == ReduceOp::Sum ? sum : sum / static_cast<float>(N));
      }
      EXPECT_EQ(in, in_copy) << "reduce_scatter must not modify its input";
      EXPECT_EQ(d.sent(), static_cast<uint64_t>((N - 1) * k * 4));
      EXPECT_EQ(d.received(), static_cast<uint64_t>((N - 1) * k * 4));
    }
  }
}

// A chunk sliced across the group (memory/chunk_layout.h) is reduce-scattered and gathered
// where it lies: the output of reduce-scatter and the input of all-gather are this rank's own
// slice of the chunk, no second buffer.
TEST_P(Collectives, ReduceScatterAndAllGatherWorkInPlaceOnAChunk) {
  const int N = world(), r = rank();
  const int64_t k = 5;
  std::vector<float> chunk(static_cast<size_t>(N * k));
  for (int64_t i = 0; i < N * k; ++i) chunk[i] = static_cast<float>(i + 10 * r);
  Tensor whole = f32(chunk);
  Tensor mine(chunk.data() + r * k, {k});
  g().reduce_scatter(whole, mine, ReduceOp::Avg);
  for (int64_t i = 0; i < k; ++i)  // mean over ranks of (r*k + i + 10 q)
    EXPECT_EQ(chunk[r * k + i], static_cast<float>(r * k + i) + 5.0f * (N - 1)) << i;
  for (int q = 0; q < N; ++q)  // other ranks' slots are then refilled by the gather
    if (q != r)
      for (int64_t i = 0; i < k; ++i) chunk[q * k + i] = -1;
  g().all_gather(mine, whole);
  for (int64_t i = 0; i < N * k; ++i)
    EXPECT_EQ(chunk[i], static_cast<float>(i) + 5.0f * (N - 1)) << i;
  // Overlapping the input anywhere but the own slice stays an error.
  if (N > 1) {
    Tensor wrong(chunk.data() + ((r + 1) % N) * k, {k});
    EXPECT_THROW(g().reduce_scatter(whole, wrong), Error);
  }
}

TEST_P(Collectives, UnevenReduceScatterIsRejectedAndPaddingWorks) {
  const int N = world(), r = rank();
  const int64_t n = 10 * N + 1;  // never divisible by N >= 2
  std::vector<float> in(n, 1.0f), out(10);
  const std::string err = error_of([&] { g().reduce_scatter(f32(in), f32(out)); });
  EXPECT_NE(err.find("pad the input to padded_numel"), std::string::npos) << err;
  // Padded: reduce-scatter, then all-gather the slices back: the first n are the full sums.
  const int64_t padded = padded_numel(n, N), k = padded / N;
  std::vector<float> buf(padded, 0.0f), slice(k), full(padded);
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(r + i);
  g().reduce_scatter(f32(buf), f32(slice));
  g().all_gather(f32(slice), f32(full));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(full[i], static_cast<float>(N * (N - 1) / 2 + N * i));
  for (int64_t i = n; i < padded; ++i) ASSERT_EQ(full[i], 0.0f);
  EXPECT_NE(
      error_of([&] { g().all_gather(f32(slice), f32(out)); }).find("output must be ranks*input"),
      std::string::npos);
}

TEST_P(Collectives, AllGatherF32AndBf16) {
  const int N = world(), r = rank();
  std::vector<float> in = {static_cast<float>(r), static_cast<float>(-r), 0.5f};
  std::vector<float> out(3 * N);
  Delta d(g());
  g().all_gather(f32(in), f32(out));
  for (int q = 0; q < N; ++q) {
    EXPECT_EQ(out[3 * q], static_cast<float>(q));
    EXPECT_EQ(out[3 * q + 1], static_cast<float>(-q));
    EXPECT_EQ(out[3 * q + 2], 0.5f);
  }
  EXPECT_EQ(d.sent(), static_cast<uint64_t>((N - 1) * 3 * 4));
  // bf16 is moved bit for bit.
  std::vector<uint16_t> h = {f32_to_bf16(1.5f * r), f32_to_bf16(-2.0f)}, hout(2 * N);
  g().all_gather(Tensor(h.data(), {2}, DType::BF16), Tensor(hout.data(), {2 * N}, DType::BF16));
  for (int q = 0; q < N; ++q) {
    EXPECT_EQ(bf16_to_f32(hout[2 * q]), 1.5f * q);
    EXPECT_EQ(bf16_to_f32(hout[2 * q + 1]), -2.0f);
  }
  // In place: rank r's input is already slot r of the output (the ZeRO layout).
  std::vector<float> shard(2 * N, -1.0f);
  shard[2 * r] = static_cast<float>(r);
  shard[2 * r + 1] = static_cast<float>(r + 100);
  g().all_gather(Tensor(shard.data() + 2 * r, {2}), f32(shard));
  for (int q = 0; q < N; ++q) {
    EXPECT_EQ(shard[2 * q], static_cast<float>(q));
    EXPECT_EQ(shard[2 * q + 1], static_cast<float>(q + 100));
  }
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  const int N = world(), r = rank();
  for (int root = 0; root < N; ++root) {
    std::vector<float> x(5, static_cast<float>(r));
    Delta d(g());
    g().broadcast(f32(x), root);
    EXPECT_EQ(x, std::vector<float>(5, static_cast<float>(root)));
    const RingTraffic t = chain_broadcast_traffic(20, N, r, root);
    EXPECT_EQ(d.sent(), static_cast<uint64_t>(t.sent));
    EXPECT_EQ(d.received(), static_cast<uint64_t>(t.received));
  }
  std::vector<float> x(1);
  EXPECT_NE(error_of([&] { g().broadcast(f32(x), N); }).find("outside this group"),
            std::string::npos);
}

TEST_P(Collectives, SendRecvAroundTheRingWithTags) {
  const int N = world(), r = rank();
  const int right = (r + 1) % N, left = (r + N - 1) % N;
  std::vector<float> a = {static_cast<float>(r), 1}, b = {static_cast<float>(r), 2};
  std::vector<float> got_a(2), got_b(2);
  Delta d(g());
  // Receive the tag-2 message first: tags, not order, match messages.
  WorkPtr rb = g().recv_async(f32(got_b), left, 2);
  WorkPtr ra = g().recv_async(f32(got_a), left, 1);
  WorkPtr sa = g().send_async(f32(a), right, 1);
  WorkPtr sb = g().send_async(f32(b), right, 2);
  for (const WorkPtr& w : {rb, ra, sa, sb}) w->wait();
  EXPECT_EQ(got_a, (std::vector<float>{static_cast<float>(left), 1}));
  EXPECT_EQ(got_b, (std::vector<float>{static_cast<float>(left), 2}));
  EXPECT_EQ(d.sent(), 16u);
  EXPECT_EQ(d.received(), 16u);
  EXPECT_NE(error_of([&] { g().send(f32(a), r); }).find("itself"), std::string::npos);
  EXPECT_NE(error_of([&] { g().send(f32(a), right, 40000); }).find("tag 40000"), std::string::npos);
}

TEST_P(Collectives, AsyncWorkCompletesInTheBackgroundWithoutWait) {
  // The trainer starts a bucket's all-reduce and computes on: the engine thread must finish it
  // while the caller never enters MPI.
  const int N = world();
  std::vector<float> x(4096, 1.0f);
  WorkPtr w = g().all_reduce_async(f32(x));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!w->is_completed() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(w->is_completed()) << "the all-reduce made no progress without wait()";
  w->wait();
  EXPECT_EQ(x[0], static_cast<float>(N));
  EXPECT_EQ(x[4095], static_cast<float>(N));
}

TEST_P(Collectives, ManyBucketsInFlightAtOnce) {
  // Several concurrent collectives of different kinds and sizes, waited in reverse order.
  const int N = world(), r = rank();
  constexpr int kBuckets = 6;
  std::vector<std::vector<float>> bufs(kBuckets);
  std::vector<WorkPtr> works;
  for (int b = 0; b < kBuckets; ++b) {
    bufs[b].assign(static_cast<size_t>(17 * (b + 1)), static_cast<float>(r + b));
    works.push_back(g().all_reduce_async(f32(bufs[b])));
  }
  std::vector<float> gathered(N);
  float mine = static_cast<float>(r);
  works.push_back(g().all_gather_async(Tensor(&mine, {1}), f32(gathered)));
  works.push_back(g().barrier_async());
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (int b = 0; b < kBuckets; ++b)
    for (float v : bufs[b]) ASSERT_EQ(v, static_cast<float>(N * (N - 1) / 2 + N * b));
  for (int q = 0; q < N; ++q) EXPECT_EQ(gathered[q], static_cast<float>(q));
}

// bf16 and f16 reductions (the NCCL rule): each addition in f32, rounded to nearest-even into the
// dtype; Avg divides the sum by the group size in f32 and rounds. Expectations are computed here
// from f32 and the dtype's conversion.
namespace {
struct Half {
  DType dtype;
  uint16_t from(float f) const { return dtype == DType::BF16 ? f32_to_bf16(f) : f32_to_f16(f); }
  float to(uint16_t h) const { return dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h); }
  Tensor tensor(std::vector<uint16_t>& v) const {
    return Tensor(v.data(), {static_cast<int64_t>(v.size())}, dtype);
  }
  Tensor slice(std::vector<uint16_t>& v, int64_t begin, int64_t k) const {
    return Tensor(v.data() + begin, {k}, dtype);
  }
  // The result of a sum `sum` (exact in the dtype) under `op` over `world` ranks.
  uint16_t reduced(float sum, ReduceOp op, int world) const {
    return op == ReduceOp::Sum ? from(sum) : from(sum / static_cast<float>(world));
  }
};
const Half kHalves[] = {{DType::BF16}, {DType::F16}};
}  // namespace

TEST_P(Collectives, AllReduceBf16AndF16SumAndAvg) {
  const int N = world(), r = rank();
  for (const Half& h : kHalves) {
    for (int64_t n : {int64_t{1}, int64_t{N - 1}, int64_t{7}, int64_t{3 * N + 1}, int64_t{1000}}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        // Halves and small integers: every partial sum (at most 40) is exact in both dtypes.
        std::vector<uint16_t> x(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) x[i] = h.from(static_cast<float>(r) + 0.5f * (i % 4));
        Delta d(g());
        g().all_reduce(h.tensor(x), op);
        for (int64_t i = 0; i < n; ++i) {
          const float sum = static_cast<float>(N * (N - 1) / 2) + 0.5f * N * (i % 4);
          ASSERT_EQ(x[i], h.reduced(sum, op, N))
              << dtype_name(h.dtype) << " n=" << n << " i=" << i << " got " << h.to(x[i]);
        }
        // Two bytes per element, measured (ring) or from the formula (mpi).
        const RingTraffic t = ring_all_reduce_traffic(n, N, r);
        EXPECT_EQ(d.sent(), static_cast<uint64_t>(t.sent) * 2) << "n=" << n;
        EXPECT_EQ(d.received(), static_cast<uint64_t>(t.received) * 2) << "n=" << n;
      }
    }
  }
}

TEST_P(Collectives, ReduceScatterBf16AndF16OutOfPlaceAndInPlace) {
  const int N = world(), r = rank();
  for (const Half& h : kHalves) {
    for (int64_t k : {1, 5}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        // Element j of rank q is q + 0.5 (j % 7): partial sums at most 52, exact in both dtypes.
        std::vector<uint16_t> in(static_cast<size_t>(N * k)), out(static_cast<size_t>(k));
        for (int64_t j = 0; j < N * k; ++j)
          in[j] = h.from(static_cast<float>(r) + 0.5f * static_cast<float>(j % 7));
        auto want = [&](int64_t j) {
          return h.reduced(static_cast<float>(N * (N - 1) / 2) + 0.5f * N * (j % 7), op, N);
        };
        const std::vector<uint16_t> in_copy = in;
        Delta d(g());
        g().reduce_scatter(h.tensor(in), h.tensor(out), op);
        for (int64_t i = 0; i < k; ++i)
          ASSERT_EQ(out[i], want(r * k + i)) << dtype_name(h.dtype) << " k=" << k << " i=" << i;
        EXPECT_EQ(in, in_copy) << "reduce_scatter must not modify its input";
        EXPECT_EQ(d.sent(), static_cast<uint64_t>((N - 1) * k * 2));
        EXPECT_EQ(d.received(), static_cast<uint64_t>((N - 1) * k * 2));
        // In place, as ZeRO reduces a sliced gradient chunk: the output is this rank's slice.
        g().reduce_scatter(h.tensor(in), h.slice(in, r * k, k), op);
        for (int64_t i = 0; i < k; ++i)
          ASSERT_EQ(in[r * k + i], want(r * k + i))
              << "in place " << dtype_name(h.dtype) << " k=" << k << " i=" << i;
      }
    }
  }
}

// A sum that is not representable: rank 0 holds 1 + a, rank 1 holds b, every other rank 0, so
// the one inexact addition is (1 + a) + b whatever the order, and its rounding decides the
// result on every world size. b spans below, above and exactly at half an ulp of 1 (ties to
// even both ways), so truncating, or rounding twice, gives a different answer.
TEST_P(Collectives, Bf16AndF16SumsRoundToNearestEvenOncePerAddition) {
  const int N = world(), r = rank();
  for (const Half& h : kHalves) {
    const float ulp = h.dtype == DType::BF16 ? 0x1p-7f : 0x1p-10f;  // of 1.0
    const std::vector<float> a = {0, 0, 0, ulp, 0, ulp};
    const std::vector<float> b = {ulp / 4, 3 * ulp / 4, ulp / 2, ulp / 2, -ulp / 4, -3 * ulp / 4};
    const int64_t n = static_cast<int64_t>(a.size());
    std::vector<uint16_t> want(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(h.to(h.from(1 + a[i])), 1 + a[i]);  // the inputs themselves are exact
      ASSERT_EQ(h.to(h.from(b[i])), b[i]);
      want[i] = h.from(h.to(h.from(1 + a[i])) + h.to(h.from(b[i])));
    }
    // What the cases pin down: 1 + 3u/4 rounds up, the ties go to the even neighbour.
    EXPECT_EQ(h.to(want[1]), 1 + ulp);
    EXPECT_EQ(h.to(want[2]), 1.0f);
    EXPECT_EQ(h.to(want[3]), 1 + 2 * ulp);
    auto value = [&](size_t i) { return h.from(r == 0 ? 1 + a[i] : r == 1 ? b[i] : 0.0f); };
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      std::vector<uint16_t> x(a.size());
      for (size_t i = 0; i < a.size(); ++i) x[i] = value(i);
      g().all_reduce(h.tensor(x), op);
      // reduce_scatter of N slices, each the same n values: every rank gets them reduced.
      std::vector<uint16_t> in(static_cast<size_t>(N * n)), out(a.size());
      for (int64_t j = 0; j < N * n; ++j) in[j] = value(static_cast<size_t>(j % n));
      g().reduce_scatter(h.tensor(in), h.tensor(out), op);
      for (size_t i = 0; i < a.size(); ++i) {
        const uint16_t expect = h.reduced(h.to(want[i]), op, N);
        EXPECT_EQ(x[i], expect) << dtype_name(h.dtype) << " all_reduce i=" << i << " got "
                                << h.to(x[i]) << " want " << h.to(expect);
        EXPECT_EQ(out[i], expect) << dtype_name(h.dtype) << " reduce_scatter i=" << i << " got "
                                  << h.to(out[i]) << " want " << h.to(expect);
      }
    }
  }
}

TEST_P(Collectives, Bf16ReductionsCountHalfTheBytesOfF32) {
  const int N = world();
  const int64_t n = 3 * N + 1;
  std::vector<float> x(static_cast<size_t>(n), 1.0f), rs(static_cast<size_t>(N * 4)), rs_out(4);
  std::vector<uint16_t> hx(x.size(), f32_to_bf16(1.0f)), hrs(rs.size()), hrs_out(rs_out.size());
  const Half h{DType::BF16};
  Delta d32(g());
  g().all_reduce(f32(x));
  g().reduce_scatter(f32(rs), f32(rs_out));
  const uint64_t sent32 = d32.sent(), received32 = d32.received();
  Delta d16(g());
  g().all_reduce(h.tensor(hx));
  g().reduce_scatter(h.tensor(hrs), h.tensor(hrs_out));
  EXPECT_GT(sent32, 0u);
  EXPECT_EQ(2 * d16.sent(), sent32);
  EXPECT_EQ(2 * d16.received(), received32);
  EXPECT_EQ(bf16_to_f32(hx[0]), static_cast<float>(N));
}

TEST_P(Collectives, MpiBackendRefusesDeviceAndIntegerReductionsClearly) {
  std::vector<float> x(4);
  EXPECT_NE(error_of([&] {
              g().all_reduce(Tensor(x.data(), {4}, DType::F32, Device::cuda(0)));
            }).find("use the NCCL backend"),
            std::string::npos);
  std::vector<int32_t> i(4 * world()), i_out(4);
  const std::string err = error_of([&] { g().all_reduce(Tensor(i.data(), {4}, DType::I32)); });
  EXPECT_NE(err.find("all_reduce: MPI reductions take f32, bf16 or f16 but got i32"),
            std::string::npos)
      << err;
  const std::string rs_err = error_of([&] {
    g().reduce_scatter(Tensor(i.data(), {4 * world()}, DType::I32),
                       Tensor(i_out.data(), {4}, DType::I32));
  });
  EXPECT_NE(rs_err.find("reduce_scatter: MPI reductions take f32, bf16 or f16 but got i32"),
            std::string::npos)
      << rs_err;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, Collectives,
                         testing::Values(CommAlgorithm::Mpi, CommAlgorithm::Ring), algo_name);

TEST(Algorithms, MpiCountersEqualRingMeasuredCounters) {
  // The theory recorded for MPI's hidden algorithm equals what the ring actually sends.
  ProcessGroup& mpi = mpi_test::world(CommAlgorithm::Mpi);
  ProcessGroup& ring = mpi_test::world(CommAlgorithm::Ring);
  const int N = mpi.size();
  mpi.reset_counters();
  ring.reset_counters();
  for (int64_t n : {int64_t{3}, int64_t{N * 4 + 3}, int64_t{257}}) {
    std::vector<float> a(n, 1.0f), b(n, 1.0f), rs(padded_numel(n, N)), rs_out(rs.size() / N);
    mpi.all_reduce(f32(a));
    ring.all_reduce(f32(b));
    EXPECT_EQ(a, b);
    mpi.reduce_scatter(f32(rs), f32(rs_out));
    ring.reduce_scatter(f32(rs), f32(rs_out));
    mpi.all_gather(f32(rs_out), f32(rs));
    ring.all_gather(f32(rs_out), f32(rs));
  }
  EXPECT_EQ(mpi.counters().bytes_sent, ring.counters().bytes_sent);
  EXPECT_EQ(mpi.counters().bytes_received, ring.counters().bytes_received);
  EXPECT_EQ(mpi.counters().calls, ring.counters().calls);
  // Every byte sent is received by someone: the totals over ranks agree.
  std::vector<float> totals = {static_cast<float>(ring.counters().bytes_sent),
                               static_cast<float>(ring.counters().bytes_received)};
  mpi.all_reduce(f32(totals));
  EXPECT_EQ(totals[0], totals[1]);
  EXPECT_GT(totals[0], 0.0f);
}
