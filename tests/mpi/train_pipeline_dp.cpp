// Data parallelism inside pipeline stages (PipelineEngine with a dp group, ZeRO stage 0): the
// world as pp = 2 stages x dp = world/2 replicas (Topology, Megatron order), each replica
// running m = 2p micro-batches of its own; stage s's gradients are averaged over its dp group.
//
//   * Against the single-rank Engine on the same global batch (dp x m micro-batches, replica d's
//     micro-batch mb being global micro-batch mb * dp + d): losses (the replicas' mean) and
//     gradient norms to 1e-5, every parameter of every stage to 1e-4, dropout 0.1.
//   * ZB-H1 and 1F1B stay bitwise equal to each other under dp, and the dp replicas of a stage
//     hold bitwise the same parameters.
//   * One gradient all-reduce per chunk per step, and its bytes, counted in StepStats.
//   * ZeRO-1 (optimizer state sliced over dp): the same single-rank equivalence; with clipping
//     on every step, post-validation (rolling back the slices) is the synchronous update's bits.
//   * ZeRO-2 (gradients sliced too): bitwise ZeRO-1's training, for 1F1B and ZB-H1, with less
//     gradient memory; post-validation as at ZeRO-1.
//   * A dp group mixing stages is a clear error. (ZeRO-3, offload and auto placement under pp:
//     train_pipeline_policies.cpp.)
// Runs on even world sizes (np 2 is dp = 1, np 4 the 2 x 2 case, np 8 2 x 4).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <map>
#include <string>

#include "dp_runs.h"
#include "mpi_test.h"
#include "test_batches.h"
#include "tide/comm/local_process_group.h"
#include "tide/comm/ring_traffic.h"
#include "tide/comm/topology.h"
#include "tide/core/rng.h"
#include "tide/exec/engine.h"
#include "tide/exec/pipeline_engine.h"
#include "tide/parallel/zero.h"
#include "tide/pipeline/generators.h"

using namespace tide;

namespace {

constexpr int kB = 2, kT = 16, kSteps = 20, kVocab = 37, kPP = 2;
constexpr uint64_t kInitSeed = 29, kRunSeed = 3;

GPTConfig config() {
  GPTConfig c;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = kVocab;
  c.max_seq_len = kT;
  c.dropout = 0.1f;
  return c;
}

OptimizerSettings optimizer() {
  return dp_runs::pipeline_test_optimizer();
}

// Global micro-batch g: tokens next = 7*prev+2 (mod V) with 25% noise, the same every step.
void fill(int g, int32_t* inputs, int32_t* targets) {
  const PhiloxStream rng{41, static_cast<uint64_t>(g)};
  test::fill_noisy_chain(rng, kB, kT, kVocab, 7, 2, inputs, targets);
}

struct ReplicaRun {
  std::vector<float> losses, norms;
  std::map<std::string, std::vector<float>> params;  // by name
  std::vector<int> reductions, gathers, rollbacks;
  std::vector<uint64_t> bytes;
  size_t grad_bytes = 0;  // the stage's gradient chunks (ZeRO-2: the slices)
};

void record_params(GPT& gpt, ReplicaRun& r) {
  const ChunkLayout& lay = gpt.store().layout();
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const Tensor t = gpt.store().tensor(ChunkKind::PARAM, id);
    r.params[lay.slot(id).name].assign(t.f32(), t.f32() + t.numel());
  }
}

ReplicaRun single_rank(int global_mbs) {
  GPT gpt(config(), ActivationPolicy::SAVE_ALL);
  gpt.init_weights(kInitSeed);
  Engine engine(gpt, std::make_shared<LocalProcessGroup>(), data_parallel_schedule(global_mbs), kB,
                kT, optimizer());
  ReplicaRun r;
  for (int64_t s = 0; s < kSteps; ++s) {
    const StepStats st =
        engine.step(s, kRunSeed, [&](int mb, int32_t* in, int32_t* tg) { fill(mb, in, tg); });
    r.losses.push_back(st.loss);
    r.norms.push_back(static_cast<float>(st.grad_norm));
  }
  record_params(gpt, r);
  return r;
}

// `zero_stage` 0, 1 (the optimizer state sliced over the dp group) or 2 (the gradients too);
// `grad_clip` < 0: the default's.
ReplicaRun pipelined(const Topology& topo, const pipeline::Schedule& schedule, int zero_stage = 0,
                     float grad_clip = -1, bool post_validate = true) {
  ModelOptions o;
  o.pp = kPP;
  o.stage = topo.coord().pp;
  if (zero_stage > 0) {
    o.group_size = topo.shape().dp;
    o.store.group_rank = topo.coord().dp;
    o.store.sliced_kinds = zero_sliced_kinds(zero_stage);
  }
  GPT gpt(config(), ActivationPolicy::SAVE_ALL, o);
  gpt.init_weights(kInitSeed);
  OptimizerSettings opt = optimizer();
  if (grad_clip >= 0) opt.grad_clip = grad_clip;
  PipelineEngine engine(gpt, topo.group_ptr(MeshAxis::PP), schedule, kB, kT, opt,
                        topo.group_ptr(MeshAxis::DP));
  engine.set_post_validation(post_validate);
  const int dp = topo.shape().dp, d = topo.coord().dp;
  ReplicaRun r;
  for (int64_t s = 0; s < kSteps; ++s) {
    const StepStats st = engine.step(s, kRunSeed, [&](int mb, int32_t* in, int32_t* tg) {
      fill(mb * dp + d, in, tg);  // this replica's slice of the global batch
    });
    float loss = st.loss;  // the replica's mean; the global batch's is the mean over replicas
    topo.dp().all_reduce(Tensor(&loss, Shape{1}), ReduceOp::Avg);
    r.losses.push_back(loss);
    r.norms.push_back(static_cast<float>(st.grad_norm));
    r.reductions.push_back(st.grad_reductions);
    r.gathers.push_back(st.param_gathers);
    r.rollbacks.push_back(st.rollbacks);
    r.bytes.push_back(st.bytes_sent);
  }
  record_params(gpt, r);
  r.grad_bytes = gpt.store().bytes(ChunkKind::GRAD);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(PipelineDataParallel, MatchesTheSingleRankRunOnTheGlobalBatch) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() % kPP != 0) GTEST_SKIP() << "pp = 2 needs an even world";
  omp_set_num_threads(1);
  const int dp = world->size() / kPP, M = 2 * kPP;
  const Topology topo(world, MeshShape{.tp = 1, .dp = dp, .pp = kPP});
  const ReplicaRun base = single_rank(dp * M);
  const ReplicaRun zb = pipelined(topo, pipeline::zb_h1(kPP, M));
  const ReplicaRun one = pipelined(topo, pipeline::one_f_one_b(kPP, M));
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(zb.losses[s], base.losses[s], 1e-5 * base.losses[s]) << "step " << s;
    EXPECT_NEAR(zb.norms[s], base.norms[s], 1e-5 * base.norms[s]) << "step " << s;
  }
  EXPECT_LT(base.losses.back(), base.losses.front() - 0.05f) << "training must move";
  for (const auto& [tensor, v] : zb.params) {
    const std::string ref = tensor == "lm_head.weight" ? "wte" : tensor;
    for (const auto& [lo, hi] : dp_runs::compared_ranges(ref, v.size())) {
      const std::vector<float> a(v.begin() + lo, v.begin() + hi);
      const std::vector<float> b(base.params.at(ref).begin() + lo,
                                 base.params.at(ref).begin() + hi);
      EXPECT_LE(dp_runs::rel_error(a, b), 1e-4)
          << "stage " << topo.coord().pp << ", " << tensor << " [" << lo << ", " << hi << ")";
    }
  }
  // Schedules stay bitwise alike under dp.
  EXPECT_TRUE(same_bits(zb.losses, one.losses));
  EXPECT_TRUE(same_bits(zb.norms, one.norms));
  for (const auto& [tensor, v] : zb.params) EXPECT_TRUE(same_bits(v, one.params.at(tensor)));

  // The stage's replicas hold the same bits: each compares with replica 0's.
  for (const auto& [tensor, v] : zb.params) {
    std::vector<float> first = v;
    topo.dp().broadcast(Tensor(first.data(), Shape{static_cast<int64_t>(first.size())}), 0);
    EXPECT_TRUE(same_bits(v, first)) << tensor << " differs from replica 0's";
  }

  // One all-reduce per gradient chunk per step (none without dp): the bytes this rank sent are
  // those of all-reducing each GRAD chunk of the stage once (the MPI group counts ring theory
  // per call: this checks what the engine reduced, not the formula).
  GPT stage(config(), ActivationPolicy::SAVE_ALL,
            ModelOptions{.pp = kPP, .stage = topo.coord().pp});
  const ChunkLayout& lay = stage.store().layout();
  uint64_t ring = 0;
  for (int c = 0; c < lay.num_chunks(); ++c)
    if (dp > 1) ring += ring_all_reduce_traffic(lay.chunk_elems(c), dp, topo.coord().dp).sent * 4;
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(zb.reductions[s], dp > 1 ? lay.num_chunks() : 0) << "step " << s;
    EXPECT_EQ(zb.bytes[s], ring) << "step " << s;
  }
}

TEST(PipelineDataParallel, ADpGroupMixingStagesIsAClearError) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() % kPP != 0 || world->size() < 2 * kPP) GTEST_SKIP() << "needs dp >= 2";
  const Topology topo(world, MeshShape{.tp = 1, .dp = world->size() / kPP, .pp = kPP});
  GPT gpt(config(), ActivationPolicy::SAVE_ALL, ModelOptions{.pp = kPP, .stage = topo.coord().pp});
  // The whole world as the dp group: it holds both stages.
  try {
    PipelineEngine e(gpt, topo.group_ptr(MeshAxis::PP), pipeline::zb_h1(kPP, 2 * kPP), kB, kT,
                     optimizer(), world);
    ADD_FAILURE() << "a dp group with two stages was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the dp group must hold the same stage"),
              std::string::npos)
        << e.what();
  }
  world->barrier();
}

// ZeRO-1 inside the stages: each replica holds and updates 1/dp of the stage's optimizer state;
// the same training as ZeRO-0 (to float rounding: reduce-scatter and the split norm sum in
// another order) and as the single-rank run.
TEST(PipelineDataParallel, ZeroOneMatchesTheSingleRankRun) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() % kPP != 0 || world->size() < 2 * kPP) GTEST_SKIP() << "needs dp >= 2";
  omp_set_num_threads(1);
  const int dp = world->size() / kPP, M = 2 * kPP;
  const Topology topo(world, MeshShape{.tp = 1, .dp = dp, .pp = kPP});
  const ReplicaRun base = single_rank(dp * M);
  const ReplicaRun z1 = pipelined(topo, pipeline::zb_h1(kPP, M), 1);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(z1.losses[s], base.losses[s], 1e-5 * base.losses[s]) << "step " << s;
    EXPECT_NEAR(z1.norms[s], base.norms[s], 1e-5 * base.norms[s]) << "step " << s;
  }
  for (const auto& [tensor, v] : z1.params) {
    const std::string ref = tensor == "lm_head.weight" ? "wte" : tensor;
    for (const auto& [lo, hi] : dp_runs::compared_ranges(ref, v.size())) {
      const std::vector<float> a(v.begin() + lo, v.begin() + hi);
      const std::vector<float> b(base.params.at(ref).begin() + lo,
                                 base.params.at(ref).begin() + hi);
      EXPECT_LE(dp_runs::rel_error(a, b), 1e-4)
          << "stage " << topo.coord().pp << ", " << tensor << " [" << lo << ", " << hi << ")";
    }
    // The replicas gathered the same whole parameters.
    std::vector<float> first = v;
    topo.dp().broadcast(Tensor(first.data(), Shape{static_cast<int64_t>(first.size())}), 0);
    EXPECT_TRUE(same_bits(v, first)) << tensor << " differs from replica 0's";
  }
  // One reduce-scatter per chunk per micro-batch (ZeroPolicy's path, shared with ZeRO-2) and
  // one all-gather per chunk per step.
  GPT stage(config(), ActivationPolicy::SAVE_ALL,
            ModelOptions{.group_size = dp, .pp = kPP, .stage = topo.coord().pp});
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(z1.reductions[s], M * stage.store().layout().num_chunks()) << "step " << s;
    EXPECT_EQ(z1.gathers[s], stage.store().layout().num_chunks()) << "step " << s;
  }
}

// ZeRO-2 inside the stages: the gradients are sliced over dp too, and the training is ZeRO-1's
// bit for bit (one gradient path: per-micro-batch reduce-scatter into the owned slice), for a
// schedule with a fused backward and one with a deferred W.
TEST(PipelineDataParallel, ZeroTwoIsZeroOneBitwise) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() % kPP != 0 || world->size() < 2 * kPP) GTEST_SKIP() << "needs dp >= 2";
  omp_set_num_threads(1);
  const int dp = world->size() / kPP, M = 2 * kPP;
  const Topology topo(world, MeshShape{.tp = 1, .dp = dp, .pp = kPP});
  for (const pipeline::Schedule& s : {pipeline::one_f_one_b(kPP, M), pipeline::zb_h1(kPP, M)}) {
    const ReplicaRun z1 = pipelined(topo, s, 1);
    const ReplicaRun z2 = pipelined(topo, s, 2);
    EXPECT_TRUE(same_bits(z1.losses, z2.losses)) << s.name;
    EXPECT_TRUE(same_bits(z1.norms, z2.norms)) << s.name;
    for (const auto& [tensor, v] : z1.params)
      EXPECT_TRUE(same_bits(v, z2.params.at(tensor))) << s.name << ": " << tensor;
    EXPECT_EQ(z1.reductions, z2.reductions) << s.name;
    EXPECT_EQ(z1.gathers, z2.gathers) << s.name;
    // The gradients are held as 1/dp slices.
    EXPECT_LE(z2.grad_bytes * dp, z1.grad_bytes + 64 * dp) << s.name;
    EXPECT_LT(z2.grad_bytes, z1.grad_bytes) << s.name;
  }
}

// Post-validation over sliced optimizer state: clipping active on every step, so every step
// rolls back the replica's slices and redoes; bitwise the synchronous update's.
TEST(PipelineDataParallel, ZeroOnePostValidationIsTheSynchronousUpdate) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() % kPP != 0 || world->size() < 2 * kPP) GTEST_SKIP() << "needs dp >= 2";
  omp_set_num_threads(1);
  const Topology topo(world, MeshShape{.tp = 1, .dp = world->size() / kPP, .pp = kPP});
  const pipeline::Schedule s = pipeline::zb_h1(kPP, 2 * kPP);
  for (int zero : {1, 2}) {
    const ReplicaRun post = pipelined(topo, s, zero, 1e-3f, true);
    const ReplicaRun sync = pipelined(topo, s, zero, 1e-3f, false);
    EXPECT_TRUE(same_bits(post.losses, sync.losses)) << "ZeRO-" << zero;
    EXPECT_TRUE(same_bits(post.norms, sync.norms)) << "ZeRO-" << zero;
    for (const auto& [tensor, v] : post.params)
      EXPECT_TRUE(same_bits(v, sync.params.at(tensor))) << "ZeRO-" << zero << ": " << tensor;
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_EQ(post.rollbacks[i], 1)
          << "ZeRO-" << zero << ", step " << i << ", norm " << post.norms[i];
      EXPECT_EQ(sync.rollbacks[i], 0) << "ZeRO-" << zero << ", step " << i;
    }
  }
}
