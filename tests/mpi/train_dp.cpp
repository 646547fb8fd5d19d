// Data parallelism = ZeRO stage 0, on 2, 3, 4 and 8 ranks (fp32, CPU).
//
// N ranks with micro-batch b must train exactly like one rank that sees the same global batch:
//   (a) one rank with micro-batch N*b, and
//   (b) one rank with micro-batch b and N gradient-accumulation steps.
// Why the data lines up: the DataLoader hands rank r slots (k*N + r)*b .. +b-1 of the sequence
// order in step k. One rank with micro-batch N*b takes slots k*N*b .. +N*b-1 (the same set), and
// one rank with micro-batch b and accumulation N takes, in micro-batch j, slots (k*N + j)*b ..
// (the same set again, rank r's slice = micro-batch r). This holds across epochs (shuffle on)
// only while every run's epoch has the same number of sequences, i.e. when the number of
// sequences is a multiple of N*b: the shards below are written that way. With another count the
// DP run and run (b) would skip different tails at the epoch end and drift apart.
//
// Runs on every rank: the DP run. On rank 0 only: the two single-process baselines (a LocalProcess
// group, no MPI), while the other ranks wait for rank 0's results.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "checkpoint_tensors.h"
#include "mpi_test.h"
#include "tide/comm/ring_traffic.h"
#include "tide/core/rng.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

using namespace tide;

namespace {

constexpr int kSteps = 20;
constexpr int kMicro = 2;  // b: sequences per micro-batch on each DP rank
constexpr int kSeqLen = 16, kVocab = 64;
constexpr int kEpochSteps = 8;  // global batches per epoch: 20 steps cross two epoch boundaries

// A directory every rank sees: rank 0 creates it and broadcasts the name.
std::string shared_temp_dir(ProcessGroup& world) {
  std::vector<int32_t> name(256, 0);
  if (world.rank() == 0) {
    char tmpl[] = "/tmp/tide_mpi_dp_XXXXXX";
    TIDE_CHECK(::mkdtemp(tmpl) != nullptr, "cannot create a temporary directory under /tmp");
    for (size_t i = 0; tmpl[i] != 0; ++i) name[i] = tmpl[i];
  }
  world.broadcast(Tensor(name.data(), {256}, DType::I32), 0);
  std::string dir;
  for (int32_t c : name)
    if (c != 0) dir.push_back(static_cast<char>(c));
  return dir;
}

// Rank 0 writes a shard of kEpochSteps*N*b sequences of kSeqLen+1 tokens (consecutive sequences
// share one token); every rank gets the path after a barrier. The tokens follow a simple rule
// (next = 5*prev+3 mod V) with 25% random tokens, so the model has something to learn.
std::string write_shared_shard(ProcessGroup& world, const std::string& dir) {
  const std::string path = dir + "/train.bin";
  if (world.rank() == 0) {
    const int64_t sequences = int64_t{kEpochSteps} * world.size() * kMicro;
    std::vector<uint16_t> tokens(static_cast<size_t>(sequences * kSeqLen + 1));
    const PhiloxStream rng{7, 1};
    uint32_t prev = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      prev = rng.uint(2 * i) % 4 == 0 ? rng.uint(2 * i + 1) % kVocab : (5 * prev + 3) % kVocab;
      tokens[i] = static_cast<uint16_t>(prev);
    }
    write_token_shard(path, std::span<const uint16_t>(tokens));
  }
  world.barrier();
  return path;
}

TrainConfig dp_config(const std::string& shard, const std::string& out_dir, int micro, int accum,
                      int64_t steps = kSteps, float dropout = 0.0f) {
  return load_train_config(
      "",
      {"data.train=" + shard, "out_dir=" + out_dir, "model.vocab_size=" + std::to_string(kVocab),
       "model.n_layer=2", "model.n_head=2", "model.n_embd=32", "seq_len=" + std::to_string(kSeqLen),
       "train_micro_batch_size_per_gpu=" + std::to_string(micro),
       "gradient_accumulation_steps=" + std::to_string(accum),
       "train_steps=" + std::to_string(steps), fmt::format("model.dropout={}", dropout),
       "data.val=" + shard, "eval.sequences=13", "data.shuffle=true",
       // chunk_size_mb 0: chunks of the largest tensor, so the model has several chunks and
       // several reductions per step.
       "chunk_size_mb=0", "optimizer.params.lr=3e-3", "threads=1", "log.progress=false"});
}

struct RunResult {
  std::vector<float> losses;
  std::vector<float> grad_norms;           // per step, before clipping
  std::vector<std::string> names;          // per tensor id
  std::vector<std::vector<float>> params;  // per tensor id, final values
};

RunResult train(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world, int64_t steps) {
  Trainer trainer(cfg, std::move(world));
  RunResult r;
  for (int64_t s = 0; s < steps; ++s) {
    const StepStats st = trainer.train_step();
    r.losses.push_back(st.loss);
    r.grad_norms.push_back(static_cast<float>(st.grad_norm));
  }
  const ChunkStore& store = trainer.model().store();
  for (int id = 0; id < store.layout().num_tensors(); ++id) {
    const Tensor p = store.tensor(ChunkKind::PARAM, id);
    r.names.push_back(store.layout().slot(id).name);
    r.params.emplace_back(p.f32(), p.f32() + p.numel());
  }
  return r;
}

// ||a - b|| / ||b||
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The element ranges of a parameter tensor that must agree between equivalent runs: all of it,
// except the key third of the fused QKV bias (3C) = [q | k | v]. Its exact gradient is zero (a
// key bias adds q.b_k to every score of a query row; softmax ignores a constant per row), so
// what backward computes there is float rounding noise, different for every summation order.
// Adam divides by sqrt(v), the size of that noise, so these entries take lr-sized random steps:
// they differ between equivalent runs by O(lr) (measured: relative error ~1 on that slice, ~1e-7
// everywhere else) and cannot affect the loss.
std::vector<std::pair<size_t, size_t>> compared_ranges(const std::string& name, size_t n) {
  if (name.ends_with("attn.c_attn.bias")) return {{0, n / 3}, {2 * n / 3, n}};
  return {{0, n}};
}

// Losses to 1e-5 relative, every parameter tensor to 1e-4 relative (Frobenius norm). The
// gradient norms too (1e-5): Adam is nearly blind to a constant factor on the gradients, so
// parameters alone would not catch gradients that are summed instead of averaged over ranks.
void expect_equivalent(const RunResult& dp, const RunResult& base, const char* what) {
  ASSERT_EQ(dp.losses.size(), base.losses.size());
  for (size_t s = 0; s < base.losses.size(); ++s) {
    EXPECT_NEAR(dp.losses[s], base.losses[s], 1e-5 * std::abs(base.losses[s]))
        << what << ", step " << s + 1;
    EXPECT_NEAR(dp.grad_norms[s], base.grad_norms[s], 1e-5 * base.grad_norms[s])
        << what << ", gradient norm at step " << s + 1;
  }
  ASSERT_EQ(dp.params.size(), base.params.size());
  for (size_t id = 0; id < base.params.size(); ++id)
    for (const auto& [begin, end] : compared_ranges(base.names[id], base.params[id].size())) {
      const std::vector<float> a(dp.params[id].begin() + begin, dp.params[id].begin() + end);
      const std::vector<float> b(base.params[id].begin() + begin, base.params[id].begin() + end);
      EXPECT_LE(rel_error(a, b), 1e-4)
          << what << ", " << base.names[id] << " [" << begin << ", " << end << ")";
    }
}

// Every rank's run must equal rank 0's bit for bit: all ranks apply the same averaged gradients.
void expect_same_on_every_rank(ProcessGroup& world, const RunResult& r) {
  std::vector<float> flat(r.losses);
  flat.insert(flat.end(), r.grad_norms.begin(), r.grad_norms.end());
  for (const auto& p : r.params) flat.insert(flat.end(), p.begin(), p.end());
  std::vector<float> root(flat);
  world.broadcast(Tensor(root.data(), {static_cast<int64_t>(root.size())}), 0);
  EXPECT_EQ(std::memcmp(root.data(), flat.data(), flat.size() * sizeof(float)), 0)
      << "rank " << world.rank() << " ended with parameters or losses different from rank 0";
}

// With dropout, too: masks are keyed by each element's global coordinates (sequence in the
// global batch, position, feature), so every split draws the single-rank run's masks.
class DataParallel : public testing::TestWithParam<std::tuple<CommAlgorithm, float>> {};

TEST_P(DataParallel, MatchesOneRankWithNTimesTheMicroBatchAndWithAccumulation) {
  const auto [algorithm, dropout] = GetParam();
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(algorithm);
  const int N = world->size();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);

  const RunResult dp = train(dp_config(shard, dir, kMicro, 1, kSteps, dropout), world, kSteps);
  expect_same_on_every_rank(*world, dp);
  if (world->rank() == 0) {
    const RunResult big_batch =
        train(dp_config(shard, dir, N * kMicro, 1, kSteps, dropout), nullptr, kSteps);
    const RunResult accumulated =
        train(dp_config(shard, dir, kMicro, N, kSteps, dropout), nullptr, kSteps);
    expect_equivalent(dp, big_batch, "DP vs one rank with micro-batch N*b");
    expect_equivalent(dp, accumulated, "DP vs one rank with N accumulation steps");
    // The comparison means something only if training moved: the loss must have dropped.
    EXPECT_LT(dp.losses.back(), dp.losses.front() - 0.3f);
  }
  world->barrier();  // rank 0 finished reading the shard
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// With accumulation, gradients are reduced once per step (after the last micro-batch): one
// all-reduce per non-empty chunk plus one for the logged loss, whatever the accumulation count.
// The bytes each rank sends are exactly the ring all-reduce traffic of those chunks.
TEST_P(DataParallel, AccumulationReducesOncePerStepNotPerMicroBatch) {
  if (std::get<1>(GetParam()) > 0) GTEST_SKIP() << "communication does not depend on dropout";
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(std::get<0>(GetParam()));
  const int N = world->size(), rank = world->rank();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  constexpr int kAccum = 3, kFewSteps = 3;

  for (int accum : {1, kAccum}) {
    Trainer trainer(dp_config(shard, dir, 1, accum, kFewSteps), world);
    const ChunkLayout& lay = trainer.model().store().layout();
    int chunks_with_tensors = 0;
    uint64_t ring_bytes = 0;
    for (int c = 0; c < lay.num_chunks(); ++c) {
      ++chunks_with_tensors;
      ring_bytes += ring_all_reduce_traffic(lay.chunk_elems(c), N, rank).sent * sizeof(float);
    }
    ASSERT_GE(chunks_with_tensors, 4) << "the test model should span several chunks";
    for (int s = 0; s < kFewSteps; ++s) {
      world->reset_counters();
      const StepStats st = trainer.train_step();
      EXPECT_EQ(st.grad_reductions, chunks_with_tensors) << "accum " << accum << ", step " << s;
      EXPECT_EQ(world->counters().calls, static_cast<uint64_t>(chunks_with_tensors) + 1)
          << "accum " << accum << ", step " << s << ": one all-reduce per chunk + the loss";
      EXPECT_EQ(st.grad_bytes_sent, ring_bytes) << "accum " << accum << ", step " << s;
    }
  }

  // DP + accumulation is still the same training as one rank with the whole global batch.
  const RunResult dp = train(dp_config(shard, dir, 1, kAccum, kFewSteps), world, kFewSteps);
  expect_same_on_every_rank(*world, dp);
  if (rank == 0) {
    const RunResult one = train(dp_config(shard, dir, N, kAccum, kFewSteps), nullptr, kFewSteps);
    expect_equivalent(dp, one, "DP with accumulation vs one rank with micro-batch N*b");
  }
  world->barrier();
  if (rank == 0) std::filesystem::remove_all(dir);
}

// A global batch size that does not match micro x accum x ranks is refused on every rank, before
// any collective, with the fix in the message.
// The validation set is a fixed list of sequences: on the same weights its loss is the same
// to the bit whatever the ranks, micro-batch and accumulation (each rank scores a share, the
// per-sequence sums are added in sequence order).
TEST_P(DataParallel, ValidationLossIsBitwiseTheSameForEverySplit) {
  if (std::get<1>(GetParam()) > 0) GTEST_SKIP() << "evaluation has no dropout";
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(std::get<0>(GetParam()));
  const int N = world->size();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  const float dp = Trainer(dp_config(shard, dir, kMicro, 1), world).evaluate();
  if (world->rank() == 0) {
    for (auto [micro, accum] : {std::pair{N * kMicro, 1}, {kMicro, N}, {1, 2 * N}, {3, 1}}) {
      const float one = Trainer(dp_config(shard, dir, micro, accum), nullptr).evaluate();
      EXPECT_EQ(std::memcmp(&one, &dp, sizeof(float)), 0)
          << "1 rank, micro-batch " << micro << " x " << accum << ": " << one << " vs DP " << dp;
    }
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// Resume on N ranks: 20 steps + a checkpoint (written by rank 0, read by every rank) + 20
// more equal 40 straight steps bitwise, losses and final checkpoint tensors (weights and Adam
// state). With dropout, so the restored step also restores the masks.
TEST_P(DataParallel, ResumeReproducesTheUninterruptedRunBitwise) {
  // Not a structured binding: lambdas below capture `dropout` (clang < 16 cannot capture those).
  const auto algorithm = std::get<0>(GetParam());
  const auto dropout = std::get<1>(GetParam());
  if (dropout == 0 || algorithm != CommAlgorithm::Mpi) GTEST_SKIP() << "one variant is enough";
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(algorithm);
  const int rank = world->rank();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  auto cfg = [&](const std::string& out, const std::string& resume) {
    TrainConfig c = dp_config(shard, out, kMicro, 2, 2 * kSteps, dropout);
    c.resume = resume;
    return c;
  };
  auto run_until = [&](Trainer& t, int64_t until, std::vector<float>& losses) {
    while (t.step() < until) losses.push_back(t.train_step().loss);
  };
  std::vector<float> want, got;
  Trainer straight(cfg(dir + "/a", ""), world);
  run_until(straight, 2 * kSteps, want);
  std::string want_ckpt = dir + "/a/final.ckpt", mid = dir + "/b/mid.ckpt";
  if (rank == 0) straight.save("final.ckpt");
  {
    Trainer first(cfg(dir + "/b", ""), world);
    run_until(first, kSteps, got);
    if (rank == 0) first.save("mid.ckpt");
    world->barrier();  // the checkpoint is written before anyone reads it
  }
  Trainer resumed(cfg(dir + "/b", mid), world);
  run_until(resumed, 2 * kSteps, got);
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) EXPECT_EQ(got[s], want[s]) << "step " << s + 1;
  if (rank == 0) {
    const auto a = test::checkpoint_tensors(want_ckpt);
    const auto b = test::checkpoint_tensors(resumed.save("final.ckpt"));
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, bytes] : a) EXPECT_EQ(b.at(name), bytes) << name;
  }
  world->barrier();
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_P(DataParallel, RejectsTrainBatchSizeThatIgnoresTheRanks) {
  if (std::get<1>(GetParam()) > 0) GTEST_SKIP() << "the check does not depend on dropout";
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(std::get<0>(GetParam()));
  const std::string dir = shared_temp_dir(*world);
  TrainConfig cfg = dp_config(write_shared_shard(*world, dir), dir, kMicro, 1);
  cfg.train_batch_size = kMicro;  // right for one rank, wrong for N
  try {
    Trainer trainer(cfg, world);
    ADD_FAILURE() << "expected a tide::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data-parallel ranks " + std::to_string(world->size())),
              std::string::npos)
        << e.what();
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, DataParallel,
                         testing::Combine(testing::Values(CommAlgorithm::Mpi, CommAlgorithm::Ring),
                                          testing::Values(0.0f, 0.1f)),
                         [](const testing::TestParamInfo<std::tuple<CommAlgorithm, float>>& info) {
                           return std::string(std::get<0>(info.param) == CommAlgorithm::Ring
                                                  ? "ring"
                                                  : "mpi") +
                                  (std::get<1>(info.param) > 0 ? "_dropout" : "");
                         });

}  // namespace
