// Tensor parallelism inside pipeline stages (PipelineEngine with models built with
// ModelOptions::tp): the world as a pp x dp x tp mesh (comm/topology.h, Megatron order),
// np 4 = pp 2 x tp 2, np 8 = pp 2 x dp 2 x tp 2.
//
// Oracle: the single-rank Engine (no pp, no tp, no dp) on the same global batch, run on every
// rank from the same seed: replica d's micro-batch mb is global micro-batch mb * dp + d (the
// engines' sequence numbering, so dropout 0.1 draws the same masks). 20 steps with clipping
// active on some steps and not on others (checked on the oracle), so a norm that counted a
// replicated tensor t times, or a shard once, or missed a stage, would clip by the wrong factor:
//
//   * losses and gradient norms to 1e-5 relative; every rank's parameter shards of every chunk
//     against the oracle's elements at tp_global_index to 1e-4 (relative Frobenius per tensor);
//   * every schedule (1F1B, ZB-H1, ZB-H2, interleaved and ZB-V with two chunks per stage) trains
//     bitwise like the others under tp;
//   * sequence parallelism (activations and gradients sent as (B,T/t,C) shards) matches the
//     oracle too;
//   * replicated tensors stay bitwise equal over the tp ranks, and the last stage's lm_head
//     shard equals stage 0's wte shard bitwise.
//   * np 8: ZeRO-1 inside the stages matches the oracle, ZeRO-2 is ZeRO-1 bit for bit.
// StepRunner given a tp size (what the Trainer passes) builds the mesh and matches the oracle
// (zb-auto, interleaved; with SP); its checkpoint holds every shard's elements exactly and a
// run resumed from it continues bitwise.
//   * np 8: checkpoints under ZeRO-1 (slices gathered over dp, shards over tp) resume bitwise.
// Bad input: a tp group whose ranks hold different stages, a tp size that does not divide the
// world: clear errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dp_runs.h"
#include "mpi_test.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/comm/local_process_group.h"
#include "tide/comm/topology.h"
#include "tide/core/rng.h"
#include "tide/exec/engine.h"
#include "tide/exec/pipeline_engine.h"
#include "tide/parallel/zero.h"
#include "tide/pipeline/generators.h"
#include "tide/train/step_runner.h"

using namespace tide;

namespace {

constexpr int kB = 2, kT = 16, kSteps = 20, kPP = 2, kTP = 2, kVocab = 67;
constexpr uint64_t kInitSeed = 5, kRunSeed = 11;
constexpr float kClip = 1.5f;

GPTConfig config() {
  GPTConfig c;
  c.n_layer = 4;  // over 2 stages x 2 chunks for interleaved and ZB-V
  c.n_head = 4;
  c.n_embd = 32;
  c.vocab_size = kVocab;  // odd: tp rank 1's last vocabulary row is padding
  c.max_seq_len = kT;
  c.dropout = 0.1f;
  return c;
}

OptimizerSettings optimizer() {
  OptimizerSettings o = dp_runs::pipeline_test_optimizer();
  // As train_engine_tensor_parallel.cpp: the key bias's exact gradient is 0 and every run gives
  // it rounding noise; eps above that noise keeps it at noise level (compared absolutely).
  o.adamw.eps = 1e-6;
  o.grad_clip = kClip;
  return o;
}

// Global micro-batch j of step `step`: tokens over the whole vocabulary, some targets ignored,
// the others a function of the token (learnable).
void fill(int step, int j, int32_t* tokens, int32_t* targets) {
  const PhiloxStream rng{77, static_cast<uint64_t>(step) * 1000 + static_cast<uint64_t>(j)};
  for (int64_t i = 0; i < int64_t{kB} * kT; ++i) {
    const int32_t token = static_cast<int32_t>(rng.uint(i) % kVocab);
    tokens[i] = token;
    targets[i] = i % 7 == 3 ? -1 : (5 * token + 1) % kVocab;
  }
}

struct StageRun {
  std::vector<float> losses, norms;
  std::vector<std::unique_ptr<GPT>> models;  // per chunk (the oracle: one, whole)
  // Per chunk, per tensor of its layout: the values at the end.
  std::vector<std::vector<std::vector<float>>> params;
};

void record_params(StageRun& r) {
  for (const auto& m : r.models) {
    const ChunkLayout& lay = m->store().layout();
    auto& chunk = r.params.emplace_back();
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const Tensor t = m->store().tensor(ChunkKind::PARAM, id);
      chunk.emplace_back(t.f32(), t.f32() + t.numel());
    }
  }
}

StageRun single_rank(int global_mbs, const GPTConfig& cfg = config(), uint64_t seed = kInitSeed) {
  StageRun r;
  r.models.push_back(std::make_unique<GPT>(cfg, ActivationPolicy::SAVE_ALL));
  GPT& gpt = *r.models[0];
  gpt.init_weights(seed);
  Engine engine(gpt, std::make_shared<LocalProcessGroup>(), data_parallel_schedule(global_mbs), kB,
                kT, optimizer());
  for (int s = 0; s < kSteps; ++s) {
    const StepStats st =
        engine.step(s, kRunSeed, [&](int mb, int32_t* in, int32_t* tg) { fill(s, mb, in, tg); });
    r.losses.push_back(st.loss);
    r.norms.push_back(static_cast<float>(st.grad_norm));
  }
  record_params(r);
  return r;
}

// kSteps steps of `schedule` on the mesh; `zero_stage` slices the stores over dp.
StageRun pipelined(const Topology& mesh, const pipeline::Schedule& schedule, bool sp = false,
                   ActivationPolicy policy = ActivationPolicy::SAVE_ALL, int zero_stage = 0) {
  StageRun r;
  std::vector<GPT*> models;
  for (int c = 0; c < schedule.chunks; ++c) {
    ModelOptions o;
    o.pp = schedule.virtual_stages();
    o.stage = schedule.virtual_stage(mesh.coord().pp, c);
    o.tp = mesh.group_ptr(MeshAxis::TP);
    o.sequence_parallel = sp;
    if (zero_stage > 0) {
      o.group_size = mesh.shape().dp;
      o.store.group_rank = mesh.coord().dp;
      o.store.sliced_kinds = zero_sliced_kinds(zero_stage);
    }
    r.models.push_back(std::make_unique<GPT>(config(), policy, o));
    r.models.back()->init_weights(kInitSeed);
    models.push_back(r.models.back().get());
  }
  PipelineEngine engine(models, mesh.group_ptr(MeshAxis::PP), schedule, kB, kT, optimizer(),
                        mesh.group_ptr(MeshAxis::DP));
  const int dp = mesh.shape().dp, d = mesh.coord().dp;
  for (int s = 0; s < kSteps; ++s) {
    const StepStats st = engine.step(s, kRunSeed, [&](int mb, int32_t* in, int32_t* tg) {
      fill(s, mb * dp + d, in, tg);  // this replica's part of the global batch
    });
    float loss = st.loss;  // the replica's mean; the global batch's is the mean over replicas
    mesh.dp().all_reduce(Tensor(&loss, Shape{1}), ReduceOp::Avg);
    r.losses.push_back(loss);
    r.norms.push_back(static_cast<float>(st.grad_norm));
  }
  record_params(r);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every chunk's shards against the oracle's elements at tp_global_index (lm_head.weight against
// wte); the key third of c_attn.bias (exact gradient 0) to 1e-4 absolute.
void expect_matches_oracle(const StageRun& run, const StageRun& one, const std::string& what) {
  ASSERT_EQ(run.losses.size(), one.losses.size());
  for (size_t s = 0; s < one.losses.size(); ++s) {
    EXPECT_NEAR(run.losses[s], one.losses[s], 1e-5 * std::fabs(one.losses[s]))
        << what << ", step " << s + 1;
    EXPECT_NEAR(run.norms[s], one.norms[s], 1e-5 * one.norms[s])
        << what << ", gradient norm at step " << s + 1;
  }
  const GPTConfig cfg = config();
  const ChunkLayout& whole = one.models[0]->store().layout();
  for (size_t c = 0; c < run.models.size(); ++c) {
    const GPT& m = *run.models[c];
    const ChunkLayout& lay = m.store().layout();
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const std::string& name = lay.slot(id).name;
      const std::vector<float>& ref =
          one.params[0][whole.find(name == "lm_head.weight" ? "wte" : name)];
      const std::vector<float>& mine = run.params[c][id];
      std::vector<float> a, b;
      for (size_t i = 0; i < mine.size(); ++i) {
        const int64_t g = tp_global_index(cfg, m.coords(), name, static_cast<int64_t>(i));
        if (g < 0) {  // vocabulary padding row
          EXPECT_EQ(mine[i], 0.0f) << what << ", " << name;
          continue;
        }
        if (name.ends_with("c_attn.bias") && g >= cfg.n_embd && g < 2 * cfg.n_embd) {
          EXPECT_NEAR(mine[i], ref[g], 1e-4) << what << ", key bias " << g;
          continue;
        }
        a.push_back(mine[i]);
        b.push_back(ref[g]);
      }
      EXPECT_LE(dp_runs::rel_error(a, b), 1e-4)
          << what << ", stage " << m.stage() << ", tp rank " << m.tp_rank() << ", " << name;
    }
  }
}

// This tp rank's shard of the whole model (every stage's tensors, in the unstaged layout's
// order; lm_head.weight, the tied copy, left out), assembled over the pipeline group: each
// tensor comes from the rank holding it, the others add zeros.
std::vector<float> whole_shard(const StageRun& r, const Topology& mesh) {
  const GPTConfig cfg = config();
  const ChunkLayout whole = make_layout(cfg, RankCoords{.tp = kTP, .tp_rank = mesh.coord().tp});
  std::vector<int64_t> offset(whole.num_tensors() + 1, 0);
  for (int g = 0; g < whole.num_tensors(); ++g) offset[g + 1] = offset[g] + whole.slot(g).numel;
  std::vector<float> v(static_cast<size_t>(offset.back()), 0.0f);
  for (size_t c = 0; c < r.models.size(); ++c) {
    const ChunkLayout& lay = r.models[c]->store().layout();
    for (int id = 0; id < lay.num_tensors(); ++id) {
      if (lay.slot(id).name == "lm_head.weight") continue;
      const int g = whole.find(lay.slot(id).name);
      std::copy(r.params[c][id].begin(), r.params[c][id].end(), v.begin() + offset[g]);
    }
  }
  mesh.pp().all_reduce(Tensor(v.data(), Shape{offset.back()}), ReduceOp::Sum);
  return v;
}

void expect_bitwise_equal(const StageRun& a, const StageRun& b, const Topology& mesh,
                          const std::string& what) {
  EXPECT_TRUE(same_bits(a.losses, b.losses)) << what << ": losses";
  EXPECT_TRUE(same_bits(a.norms, b.norms)) << what << ": gradient norms";
  EXPECT_TRUE(same_bits(whole_shard(a, mesh), whole_shard(b, mesh))) << what << ": parameters";
}

// Replicated tensors bitwise equal over the tp group (each rank against tp rank 0's).
void expect_replicas_equal(const StageRun& r, ProcessGroup& tp, const std::string& what) {
  for (size_t c = 0; c < r.models.size(); ++c) {
    const ChunkLayout& lay = r.models[c]->store().layout();
    for (int id = 0; id < lay.num_tensors(); ++id) {
      if (tp_sharded(lay.slot(id).name)) continue;
      std::vector<float> root = r.params[c][id];
      tp.broadcast(Tensor(root.data(), Shape{static_cast<int64_t>(root.size())}), 0);
      EXPECT_TRUE(same_bits(root, r.params[c][id]))
          << what << ": replicated " << lay.slot(id).name << " differs from tp rank 0's";
    }
  }
}

bool runs_here(int world) {
  return world == kPP * kTP || world == 2 * kPP * kTP;
}

}  // namespace

TEST(PipelineTensorParallel, EverySchedulesMatchesTheSingleRankRunAndEachOther) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (!runs_here(world->size())) GTEST_SKIP() << "pp 2 x tp 2 (np 4) or pp 2 x dp 2 x tp 2 (np 8)";
  omp_set_num_threads(1);  // up to 8 ranks share 2 cores
  const int dp = world->size() / (kPP * kTP), M = 2 * kPP;
  const Topology mesh(world, MeshShape{.tp = kTP, .dp = dp, .pp = kPP});
  const StageRun one = single_rank(dp * M);
  int clipped = 0;
  for (float n : one.norms) clipped += n > kClip;
  ASSERT_GT(clipped, 0) << "no step clipped: " << ::testing::PrintToString(one.norms);
  ASSERT_LT(clipped, kSteps) << "every step clipped: " << ::testing::PrintToString(one.norms);
  EXPECT_LT(one.losses.back(), one.losses.front() - 0.05f) << "training must move the loss";

  const std::string where = mesh.shape().str();
  const StageRun zb = pipelined(mesh, pipeline::zb_h1(kPP, M));
  expect_matches_oracle(zb, one, where + ", zb-h1");
  expect_replicas_equal(zb, mesh.tp(), where + ", zb-h1");
  // The tied copies: the last stage's lm_head shard is stage 0's wte shard, bitwise.
  {
    const GPT& m = *zb.models[0];
    const ChunkLayout& lay = m.store().layout();
    const int id = lay.find(m.has_embedding() ? "wte" : "lm_head.weight");
    std::vector<float> v = zb.params[0][id], other(v.size());
    const int peer = 1 - mesh.coord().pp;
    const int64_t n = static_cast<int64_t>(v.size());
    const WorkPtr sent = mesh.pp().send_async(Tensor(v.data(), Shape{n}), peer, 7);
    mesh.pp().recv_async(Tensor(other.data(), Shape{n}), peer, 7)->wait();
    sent->wait();
    EXPECT_TRUE(same_bits(v, other)) << where << ": wte and lm_head.weight differ";
  }
  for (const pipeline::Schedule& s :
       {pipeline::one_f_one_b(kPP, M), pipeline::zb_h2(kPP, M),
        pipeline::interleaved_1f1b(kPP, M, 2), pipeline::zb_v(kPP, M)})
    expect_bitwise_equal(pipelined(mesh, s), zb, mesh, where + ", " + s.name + " vs zb-h1");
}

TEST(PipelineTensorParallel, SequenceParallelMatchesTheSingleRankRun) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (!runs_here(world->size())) GTEST_SKIP() << "pp 2 x tp 2 (np 4) or pp 2 x dp 2 x tp 2 (np 8)";
  omp_set_num_threads(1);
  const int dp = world->size() / (kPP * kTP), M = 2 * kPP;
  const Topology mesh(world, MeshShape{.tp = kTP, .dp = dp, .pp = kPP});
  const StageRun one = single_rank(dp * M);
  const std::string where = mesh.shape().str() + " + SP, selective";
  const StageRun sp =
      pipelined(mesh, pipeline::zb_h1(kPP, M), /*sp=*/true, ActivationPolicy::SELECTIVE);
  expect_matches_oracle(sp, one, where);
  expect_replicas_equal(sp, mesh.tp(), where);
}

TEST(PipelineTensorParallel, ATpGroupMixingStagesIsAClearError) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() != kPP * kTP) GTEST_SKIP() << "pp 2 x tp 2";
  const Topology mesh(world, MeshShape{.tp = kTP, .dp = 1, .pp = kPP});
  // The mesh's pp group ({0,2} {1,3}) as the models' tp group: each tp group holds both stages.
  ModelOptions o;
  o.pp = kPP;
  o.stage = mesh.coord().pp;
  o.tp = mesh.group_ptr(MeshAxis::PP);
  GPT gpt(config(), ActivationPolicy::SAVE_ALL, o);
  try {
    PipelineEngine e(gpt, mesh.group_ptr(MeshAxis::PP), pipeline::zb_h1(kPP, 2 * kPP), kB, kT,
                     optimizer());
    ADD_FAILURE() << "a tp group holding two stages was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the tp group must hold the same stage"),
              std::string::npos)
        << e.what();
  }
  world->barrier();
}

// StepRunner (the Trainer's step runner) given a tp size builds the pp x dp x tp mesh
// itself; zb-auto's measured warm-up step then switches every rank to the same schedule (world
// rank 0's figures: the tp ranks must run their block collectives in the same order), and the
// run still matches the single-rank oracle. Its checkpoint (each stage's tp shards gathered and
// written whole) holds every shard's elements exactly (read by a one-rank model), and a run
// resumed from it at pp x dp x tp continues bitwise.
TrainConfig run_config(const std::string& schedule, int zero = 0, bool sp = false) {
  const int M = 2 * kPP;
  return load_train_config(
      "",
      {"model.vocab_size=" + std::to_string(kVocab), "model.n_layer=4", "model.n_head=4",
       "model.n_embd=32", "model.dropout=0.1", "seq_len=" + std::to_string(kT),
       "model.max_seq_len=" + std::to_string(kT),
       "train_micro_batch_size_per_gpu=" + std::to_string(kB),
       "gradient_accumulation_steps=" + std::to_string(M), "seed=9", "chunk_size_mb=0",
       "pipeline.stages=" + std::to_string(kPP), "pipeline.schedule=" + schedule,
       std::string("pipeline.virtual_stages=") + (schedule == "interleaved" ? "2" : "1"),
       fmt::format("zero_optimization.stage={}", zero), fmt::format("tensor_parallel.size={}", kTP),
       fmt::format("tensor_parallel.sequence_parallel={}", sp)});
}

// Steps [from, to) of `run`; the global batch's mean losses.
std::vector<float> run_steps(StepRunner& run, int from, int to, std::vector<float>* norms) {
  const int dp = run.dp().size(), d = run.dp().rank();
  std::vector<float> losses;
  for (int s = from; s < to; ++s) {
    const StepStats st = run.step(
        s, kRunSeed, [&](int mb, int32_t* in, int32_t* tg) { fill(s, mb * dp + d, in, tg); },
        nullptr);
    float loss = st.loss;
    run.dp().all_reduce(Tensor(&loss, Shape{1}), ReduceOp::Avg);
    losses.push_back(loss);
    if (norms) norms->push_back(static_cast<float>(st.grad_norm));
  }
  return losses;
}

TEST(PipelineTensorParallel, StepRunnerWithATpSizeMatchesTheSingleRankRunAndResumesBitwise) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (!runs_here(world->size())) GTEST_SKIP() << "pp 2 x tp 2 (np 4) or pp 2 x dp 2 x tp 2 (np 8)";
  omp_set_num_threads(1);
  const int dp = world->size() / (kPP * kTP), M = 2 * kPP, half = kSteps / 2;
  const std::string dir = dp_runs::shared_temp_dir(*world);
  for (const std::string schedule : {"zb-auto", "interleaved"}) {
    const TrainConfig cfg = run_config(schedule, 0, /*sp=*/true);
    const StageRun one = single_rank(dp * M, cfg.model, cfg.seed);
    StepRunner run(cfg, world, optimizer());
    ASSERT_EQ(run.tp().size(), kTP);
    ASSERT_EQ(run.dp().size(), dp);
    ASSERT_EQ(run.pp().size(), kPP);
    for (const auto& chunk : run.chunks()) {
      ASSERT_EQ(chunk->tp(), kTP) << "the chunks are not built over the tp group";
      ASSERT_TRUE(chunk->sequence_parallel());
    }
    std::vector<float> norms;
    std::vector<float> losses = run_steps(run, 0, half, &norms);
    if (schedule == "zb-auto") EXPECT_EQ(run.engine().schedule().name, "zb-auto");
    const std::string ck = dir + "/" + schedule + ".ckpt";
    CheckpointInfo info;
    info.config = cfg.model;
    info.step = half;
    run.save(ck, info);
    // The checkpoint holds this rank's shard elements exactly: a one-rank model reads them.
    {
      GPT whole(cfg.model, ActivationPolicy::SAVE_ALL);
      load_checkpoint_shard(ck, whole.store(), cfg.model, /*with_optimizer_state=*/true);
      for (const auto& chunk : run.chunks()) {
        const ChunkLayout& lay = chunk->store().layout();
        for (int id = 0; id < lay.num_tensors(); ++id) {
          const std::string& name = lay.slot(id).name;
          for (ChunkKind k : {ChunkKind::PARAM, ChunkKind::ADAM_M, ChunkKind::ADAM_V}) {
            const Tensor mine = chunk->store().tensor(k, id);
            const Tensor ref = whole.store().tensor(
                k, whole.store().layout().find(name == "lm_head.weight" ? "wte" : name));
            int64_t differ = 0;
            for (int64_t i = 0; i < mine.numel(); ++i) {
              const int64_t g = tp_global_index(cfg.model, chunk->coords(), name, i);
              if (g >= 0 && std::memcmp(&mine.f32()[i], &ref.f32()[g], 4) != 0) ++differ;
            }
            EXPECT_EQ(differ, 0) << schedule << ": " << name << " (" << chunk_kind_name(k)
                                 << ") not saved exactly";
          }
        }
      }
    }
    const std::vector<float> rest = run_steps(run, half, kSteps, &norms);
    losses.insert(losses.end(), rest.begin(), rest.end());
    for (size_t s = 0; s < one.losses.size(); ++s) {
      EXPECT_NEAR(losses[s], one.losses[s], 1e-5 * std::fabs(one.losses[s]))
          << schedule << ", step " << s + 1;
      EXPECT_NEAR(norms[s], one.norms[s], 1e-5 * one.norms[s])
          << schedule << ", gradient norm at step " << s + 1;
    }
    // Resumed at pp x dp x tp: the second half again, bitwise.
    StepRunner resumed(cfg, world, optimizer());
    resumed.load(ck);
    EXPECT_TRUE(same_bits(run_steps(resumed, half, kSteps, nullptr), rest))
        << schedule << ": the resumed run is not bitwise the uninterrupted one";
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// Checkpoints of pp x dp x tp under ZeRO-1 (optimizer state sliced over dp and split over tp):
// the slices gathered over dp, then the shards over tp, written whole by (tp 0, dp 0). The run
// resumed from it under ZeRO-1, and under ZeRO-2 (which trains as ZeRO-1 bit for bit), continues
// bitwise.
TEST(PipelineTensorParallel, CheckpointsWithTpAndZeroResumeBitwise) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() != 2 * kPP * kTP) GTEST_SKIP() << "pp 2 x dp 2 x tp 2 (np 8)";
  omp_set_num_threads(1);
  const int half = kSteps / 2;
  const std::string dir = dp_runs::shared_temp_dir(*world);
  StepRunner run(run_config("1f1b", 1), world, optimizer());
  run_steps(run, 0, half, nullptr);
  const std::string ck = dir + "/z1.ckpt";
  CheckpointInfo info;
  info.config = run.chunks()[0]->config();
  info.step = half;
  run.save(ck, info);
  const std::vector<float> rest = run_steps(run, half, kSteps, nullptr);
  for (int zero : {1, 2}) {
    StepRunner resumed(run_config("1f1b", zero), world, optimizer());
    resumed.load(ck);
    EXPECT_TRUE(same_bits(run_steps(resumed, half, kSteps, nullptr), rest))
        << "ZeRO-" << zero << ": the resumed run is not bitwise the uninterrupted one";
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

TEST(PipelineTensorParallel, StepRunnerWithATpSizeThatDoesNotDivideTheWorldIsAClearError) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() % kPP != 0) GTEST_SKIP() << "pp = 2 needs an even world";
  TrainConfig cfg =
      load_train_config("", {"model.vocab_size=67", "model.n_layer=4", "model.n_head=4",
                             "model.n_embd=32", "seq_len=16", "gradient_accumulation_steps=4",
                             "pipeline.stages=2", "pipeline.schedule=1f1b"});
  cfg.tensor_parallel = world->size() / kPP + 1;  // stages x that never divides the world
  const int bad = cfg.tensor_parallel;
  try {
    StepRunner run(cfg, world, optimizer());
    ADD_FAILURE() << "tp " << bad << " on " << world->size() << " ranks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide the"), std::string::npos) << e.what();
  }
  world->barrier();
}

// ZeRO-R P_a inside the pipeline's stages (pp 2 x tp 2, full recompute): each block keeps a 1/t
// slice of its input between F and B (on the host with cpu_checkpointing) and B all-gathers it
// over the stage's tp group, with micro-batches in flight and W deferred (ZB-H1) or two chunks
// per stage (interleaved). Where the block inputs live changes no arithmetic, so losses,
// gradient norms and every parameter and Adam moment equal the run without P_a bit for bit.
TEST(PipelineTensorParallel, PartitionedActivationsInsideTheStagesTrainBitwiseAsWithout) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (!runs_here(world->size())) GTEST_SKIP() << "pp 2 x tp 2 (np 4) or pp 2 x dp 2 x tp 2 (np 8)";
  omp_set_num_threads(1);
  constexpr int kPaSteps = 4;
  for (const std::string schedule : {"zb-h1", "interleaved"}) {
    auto run = [&](bool pa, bool cpu, std::vector<float>* norms) {
      TrainConfig cfg = run_config(schedule);
      cfg.activation_policy = ActivationPolicy::FULL;
      cfg.partition_activations = pa;
      cfg.cpu_checkpointing = cpu;
      auto r = std::make_unique<StepRunner>(cfg, world, optimizer());
      for (const auto& chunk : r->chunks()) EXPECT_EQ(chunk->partition_activations(), pa);
      const std::vector<float> losses = run_steps(*r, 0, kPaSteps, norms);
      return std::make_pair(std::move(r), losses);
    };
    std::vector<float> want_norms;
    const auto [ref, want] = run(false, false, &want_norms);
    for (bool cpu : {false, true}) {
      const std::string what = schedule + (cpu ? ", cpu_checkpointing" : "");
      std::vector<float> norms;
      const auto [got, losses] = run(true, cpu, &norms);
      EXPECT_TRUE(same_bits(losses, want)) << what << ": losses";
      EXPECT_TRUE(same_bits(norms, want_norms)) << what << ": gradient norms";
      if (cpu) EXPECT_GT(got->engine().host_checkpoint_bytes(), 0u) << what;
      for (size_t c = 0; c < ref->chunks().size(); ++c)
        for (ChunkKind k : {ChunkKind::PARAM, ChunkKind::ADAM_M, ChunkKind::ADAM_V}) {
          const ChunkStore& a = ref->chunks()[c]->store();
          const ChunkStore& b = got->chunks()[c]->store();
          for (int ch = 0; ch < a.layout().num_chunks(); ++ch) {
            const Tensor x = a.chunk(k, ch), y = b.chunk(k, ch);
            EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes()), 0)
                << what << ": chunk " << c << "'s " << chunk_kind_name(k) << " chunk " << ch;
          }
        }
    }
  }
  world->barrier();
}

// pp x dp x tp with ZeRO inside the stages: ZeRO-1 matches the oracle, ZeRO-2 is ZeRO-1's
// training bit for bit, for one chunk per stage (the tied gradient summed between two ranks)
// and ZB-V (both ends of the tie on one rank, in different chunks).
TEST(PipelineTensorParallel, ZeroOneAndTwoInsideTheStages) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() != 2 * kPP * kTP) GTEST_SKIP() << "pp 2 x dp 2 x tp 2 (np 8)";
  omp_set_num_threads(1);
  const int dp = 2, M = 2 * kPP;
  const Topology mesh(world, MeshShape{.tp = kTP, .dp = dp, .pp = kPP});
  const StageRun one = single_rank(dp * M);
  for (const pipeline::Schedule& s : {pipeline::zb_h1(kPP, M), pipeline::zb_v(kPP, M)}) {
    const std::string where = mesh.shape().str() + ", " + s.name;
    const StageRun z1 = pipelined(mesh, s, false, ActivationPolicy::SAVE_ALL, 1);
    expect_matches_oracle(z1, one, where + ", ZeRO-1");
    const StageRun z2 = pipelined(mesh, s, false, ActivationPolicy::SAVE_ALL, 2);
    expect_bitwise_equal(z2, z1, mesh, where + ", ZeRO-2 vs ZeRO-1");
    expect_replicas_equal(z2, mesh.tp(), where + ", ZeRO-2");
  }
}
