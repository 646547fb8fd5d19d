// The Engine with tensor parallelism (Megatron-LM), alone and composed with data parallelism and
// ZeRO over a tp x dp mesh (comm/topology.h, tp fastest).
//
// Oracle: the single-rank Engine (no tp, no dp) on the same global batch, run on every rank
// from the same seed: its micro-batch j is dp replica j % dp's micro-batch j / dp (the engine's
// global sequence numbering, so dropout draws the same masks). 20 steps with dropout 0.1 and
// gradient clipping that is active on some steps and not on others (checked on the oracle):
// losses and gradient norms to 1e-5 relative, every rank's final parameter shards against the
// oracle's elements at tp_global_index to 1e-4 (relative Frobenius per tensor). A norm that
// counted a replicated tensor (layernorms, c_proj biases, wpe) t times, or a shard once,
// would clip by the wrong factor and move the gradient norm and the parameters.
//
// World sizes: 2 ranks: tp = 2 with each activation policy, SP on and off; 3: tp = 3; 4: tp = 4
// with each policy, SP on and off, and tp x dp = 2 x 2 with accumulation 2 at ZeRO stages 0-3;
// 8: 4 x 2. Checkpoints (tp_checkpoint.h): a resume at the same tp is bitwise, the single-rank
// model reads the shards' elements exactly, tp 4 -> 2 loads; a ZeRO-sliced store without its dp
// group is refused.

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dp_runs.h"
#include "mpi_test.h"
#include "tide/checkpoint/tp_checkpoint.h"
#include "tide/comm/local_process_group.h"
#include "tide/comm/topology.h"
#include "tide/core/rng.h"
#include "tide/exec/engine.h"
#include "tide/model/gpt.h"

using namespace tide;

namespace {

constexpr int kB = 2, kT = 24, kSteps = 20;
// Clipping threshold for a global batch of `micro_batches`: the oracle's norms go from 1.9 to
// 4.3 with one micro-batch, from 1.2 to 1.8 with four, so about half the steps clip.
float clip_for(int micro_batches) {
  return micro_batches == 1 ? 2.5f : 1.5f;
}

GPTConfig tiny_config() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 12;
  c.n_embd = 48;
  c.vocab_size = 67;  // divides over none of 2, 3, 4: the last ranks' padding rows are used
  c.max_seq_len = kT;
  c.dropout = 0.1f;
  return c;
}

// Global micro-batch j of step `step`: tokens over the whole vocabulary, some targets ignored,
// the others a function of the token (learnable).
void fill(int step, int j, int32_t* tokens, int32_t* targets) {
  const PhiloxStream rng{77, static_cast<uint64_t>(step) * 1000 + static_cast<uint64_t>(j)};
  for (int64_t i = 0; i < int64_t{kB} * kT; ++i) {
    const int32_t token = static_cast<int32_t>(rng.uint(i) % 67);
    tokens[i] = token;
    targets[i] = i % 7 == 3 ? -1 : (5 * token + 1) % 67;
  }
}

OptimizerSettings optimizer(float clip) {
  OptimizerSettings o;
  // 3e-3: at 1e-2 the tp and the single-rank runs drift apart after ~5 steps (rounding noise
  // amplified by Adam's normalisation, with clipping off too), past 1e-5 on the loss.
  o.adamw.lr = 3e-3;
  o.adamw.weight_decay = 0.1;
  // As in train_tensor_parallel.cpp: the key bias's exact gradient is 0, and both runs give it
  // rounding noise; eps above that noise keeps it at noise level (compared in absolute terms).
  o.adamw.eps = 1e-6;
  o.lr.type = LrScheduleType::CONSTANT;
  o.lr.lr = o.adamw.lr;
  o.grad_clip = clip;
  return o;
}

struct Run {
  std::vector<float> losses, norms;
  const GPT* model = nullptr;
  std::vector<std::vector<float>> params;  // per tensor of the model's layout, whole (gathered)
};

struct Case {
  int tp = 1, dp = 1, accum = 1, zero = 0;
  bool sp = false;
  ActivationPolicy policy = ActivationPolicy::SAVE_ALL;
  std::string name() const {
    return fmt::format("tp{} x dp{}, accum {}, zero {}, {}{}", tp, dp, accum, zero,
                       activation_policy_name(policy), sp ? " + SP" : "");
  }
};

// 20 Engine steps of `c` on `world` (nullptr: the single-rank oracle over dp * accum
// micro-batches). Keeps the model alive in `holder` for the comparison.
Run train(const Case& c, std::shared_ptr<ProcessGroup> world, std::unique_ptr<GPT>& holder) {
  std::shared_ptr<ProcessGroup> tp, dp = std::make_shared<LocalProcessGroup>();
  std::unique_ptr<Topology> mesh;
  if (world) {
    mesh = std::make_unique<Topology>(world, MeshShape{.tp = c.tp, .dp = c.dp});
    tp = mesh->group_ptr(MeshAxis::TP);
    dp = mesh->group_ptr(MeshAxis::DP);
  }
  ModelOptions mo;
  mo.tp = tp;
  mo.sequence_parallel = world && c.sp;
  mo.group_size = dp->size();
  mo.store.group_rank = dp->rank();
  mo.store.sliced_kinds = zero_sliced_kinds(c.zero);
  holder = std::make_unique<GPT>(tiny_config(), world ? c.policy : ActivationPolicy::SAVE_ALL, mo);
  GPT& model = *holder;
  model.init_weights(5);
  ZeroSettings zs;
  zs.stage = world ? c.zero : 0;
  const int M = world ? c.accum : c.accum * c.dp;
  Engine engine(model, dp, data_parallel_schedule(M), kB, kT, optimizer(clip_for(c.accum * c.dp)),
                zs);
  Run r;
  r.model = &model;
  for (int s = 0; s < kSteps; ++s) {
    const StepStats st = engine.step(s, 11, [&](int mb, int32_t* in, int32_t* tg) {
      fill(s, mb * dp->size() + dp->rank(), in, tg);
    });
    float loss = st.loss;  // this replica's mean: average over the replicas
    dp->all_reduce(Tensor(&loss, Shape{1}), ReduceOp::Avg);
    r.losses.push_back(loss);
    r.norms.push_back(static_cast<float>(st.grad_norm));
  }
  // Whole parameter chunks from every replica's slice (ZeRO-3 holds only its slice).
  const ChunkStore& store = model.store();
  const ChunkLayout& lay = store.layout();
  std::vector<std::vector<float>> chunks(lay.num_chunks());
  for (int ch = 0; ch < lay.num_chunks(); ++ch) {
    chunks[ch].resize(lay.chunk_elems(ch));
    dp->all_gather(store.slice(ChunkKind::PARAM, ch),
                   Tensor(chunks[ch].data(), Shape{lay.chunk_elems(ch)}));
  }
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const TensorSlot& slot = lay.slot(id);
    const float* p = chunks[slot.chunk].data() + slot.offset;
    r.params.emplace_back(p, p + slot.numel);
  }
  return r;
}

// Every tensor of this rank's shard against the oracle's elements at tp_global_index: relative
// Frobenius error per tensor, and over all of them. The key third of c_attn.bias (exact
// gradient 0, see above) to 1e-4 absolute instead.
void expect_params_match(const Run& tp, const Run& one, const std::string& what) {
  const GPTConfig& cfg = tp.model->config();
  const ChunkLayout& lay = tp.model->store().layout();
  const ChunkLayout& whole = one.model->store().layout();
  std::vector<float> all_a, all_b;
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const std::string& name = lay.slot(id).name;
    const std::vector<float>& ref = one.params[whole.find(name)];
    std::vector<float> a, b;
    for (size_t i = 0; i < tp.params[id].size(); ++i) {
      const int64_t g = tp_global_index(cfg, tp.model->coords(), name, static_cast<int64_t>(i));
      if (g < 0) {  // vocabulary padding row
        EXPECT_EQ(tp.params[id][i], 0.0f) << what << ", " << name;
        continue;
      }
      if (name.ends_with("c_attn.bias") && g >= cfg.n_embd && g < 2 * cfg.n_embd) {
        EXPECT_NEAR(tp.params[id][i], ref[g], 1e-4) << what << ", key bias " << g;
        continue;
      }
      a.push_back(tp.params[id][i]);
      b.push_back(ref[g]);
    }
    EXPECT_LE(dp_runs::rel_error(a, b), 1e-4) << what << ", " << name;
    all_a.insert(all_a.end(), a.begin(), a.end());
    all_b.insert(all_b.end(), b.begin(), b.end());
  }
  EXPECT_LE(dp_runs::rel_error(all_a, all_b), 1e-4) << what << ", all parameters";
}

void check(const Case& c) {
  omp_set_num_threads(1);  // up to 8 ranks share 2 cores
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  ASSERT_EQ(c.tp * c.dp, world->size());
  std::unique_ptr<GPT> one_model, tp_model;
  const Run one = train(c, nullptr, one_model);
  // The comparison tests the norm only if clipping is active on some steps and not on others.
  int clipped = 0;
  for (float n : one.norms) clipped += n > clip_for(c.accum * c.dp);
  ASSERT_GT(clipped, 0) << "no step clipped: " << ::testing::PrintToString(one.norms);
  ASSERT_LT(clipped, kSteps) << "every step clipped: " << ::testing::PrintToString(one.norms);
  const Run tp = train(c, world, tp_model);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(tp.losses[s], one.losses[s], 1e-5 * std::fabs(one.losses[s]))
        << c.name() << ", step " << s + 1;
    EXPECT_NEAR(tp.norms[s], one.norms[s], 1e-5 * one.norms[s])
        << c.name() << ", gradient norm at step " << s + 1;
  }
  expect_params_match(tp, one, c.name());
  // Replicated tensors stay bitwise equal on the tp ranks (the norm and the checkpoints take
  // tp rank 0's copy): each rank's against rank 0's.
  ProcessGroup& tpg = *tp.model->tp_group();
  const ChunkLayout& lay = tp.model->store().layout();
  for (int id = 0; id < lay.num_tensors(); ++id) {
    if (tp_sharded(lay.slot(id).name)) continue;
    std::vector<float> root = tp.params[id];
    tpg.broadcast(Tensor(root.data(), Shape{static_cast<int64_t>(root.size())}), 0);
    EXPECT_EQ(std::memcmp(root.data(), tp.params[id].data(), root.size() * sizeof(float)), 0)
        << c.name() << ": replicated " << lay.slot(id).name << " differs from tp rank 0's";
  }
  EXPECT_LT(one.losses.back(), one.losses.front() - 0.05f) << "training must move the loss";
}

using P = ActivationPolicy;

TEST(EngineTensorParallel, MatchesOneRankForEachPolicyWithAndWithoutSP) {
  const int n = mpi_test::world().size();
  if (n == 2) {
    for (P p : {P::SAVE_ALL, P::SELECTIVE, P::FULL})
      for (bool sp : {false, true}) check({.tp = 2, .sp = sp, .policy = p});
  } else if (n == 3) {
    check({.tp = 3, .sp = true, .policy = P::SELECTIVE});
  } else if (n == 4) {
    for (P p : {P::SAVE_ALL, P::SELECTIVE, P::FULL})
      for (bool sp : {false, true}) check({.tp = 4, .sp = sp, .policy = p});
  } else {
    GTEST_SKIP() << "tp x dp at 8 ranks: see TpTimesDp";
  }
}

TEST(EngineTensorParallel, TpTimesDpWithAccumulationAtEachZeroStage) {
  const int n = mpi_test::world().size();
  if (n == 4) {
    for (int zero : {0, 1, 2, 3})
      check({.tp = 2,
             .dp = 2,
             .accum = 2,
             .zero = zero,
             .sp = zero % 2 == 1,
             .policy = zero == 2 ? P::SELECTIVE : P::SAVE_ALL});
  } else if (n == 8) {
    check({.tp = 4, .dp = 2, .accum = 2, .zero = 1, .sp = true, .policy = P::SELECTIVE});
  } else {
    GTEST_SKIP() << "tp x dp needs 4 or 8 ranks";
  }
}

}  // namespace

// The Trainer must pass the mesh's dp group; the world instead (with its tp partners, whose
// shards differ) would average unrelated gradients: a clear error.
TEST(EngineTensorParallel, WorldPassedAsTheDataParallelGroupIsRefused) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() != 4) GTEST_SKIP() << "tp 2 x dp 2";
  Topology mesh(world, MeshShape{.tp = 2, .dp = 2});
  ModelOptions mo;
  mo.tp = mesh.group_ptr(MeshAxis::TP);
  mo.group_size = 2;
  mo.store.group_rank = mesh.coord().dp;
  GPT model(tiny_config(), ActivationPolicy::SAVE_ALL, mo);
  try {
    Engine engine(model, world, data_parallel_schedule(1), kB, kT, optimizer(2.5f));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MeshAxis::DP"), std::string::npos) << e.what();
  }
}

// TP checkpoints (tp_checkpoint.h): saved as the unsharded model, so a resume at the same tp is
// bitwise, the single-rank model (what `tide sample` / `tide export` read) loads every element
// exactly where tp_global_index puts it, and a load at another tp works too.
namespace ckpt {

std::unique_ptr<GPT> make_model(std::shared_ptr<ProcessGroup> tp) {
  ModelOptions mo;
  mo.tp = std::move(tp);
  mo.sequence_parallel = mo.tp != nullptr;
  return std::make_unique<GPT>(tiny_config(), ActivationPolicy::SELECTIVE, mo);
}

// Steps [from, to) of a tp run (the world as the tp group); returns the losses.
std::vector<float> run_steps(GPT& model, int from, int to) {
  Engine engine(model, std::make_shared<LocalProcessGroup>(), data_parallel_schedule(1), kB, kT,
                optimizer(clip_for(1)));
  std::vector<float> losses;
  for (int s = from; s < to; ++s)
    losses.push_back(
        engine.step(s, 11, [&](int mb, int32_t* in, int32_t* tg) { fill(s, mb, in, tg); }).loss);
  return losses;
}

// Every element of `shard` (kind k) equals `whole`'s at tp_global_index, bit for bit; padding 0.
void expect_shard_of(const GPT& shard, const GPT& whole, ChunkKind k, const std::string& what) {
  const ChunkLayout& lay = shard.store().layout();
  int64_t wrong = 0;
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const std::string& name = lay.slot(id).name;
    const Tensor s = shard.store().tensor(k, id);
    const Tensor w = whole.store().tensor(k, whole.store().layout().find(name));
    for (int64_t i = 0; i < s.numel(); ++i) {
      const int64_t g = tp_global_index(shard.config(), shard.coords(), name, i);
      const float ref = g < 0 ? 0.0f : w.f32()[g];
      wrong += std::memcmp(&s.f32()[i], &ref, sizeof(float)) != 0;
    }
  }
  EXPECT_EQ(wrong, 0) << what << ": elements that differ";
}

TEST(EngineTensorParallelCheckpoint, ResumeIsBitwiseAndOneRankReadsTheWholeModel) {
  omp_set_num_threads(1);
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() > 4) GTEST_SKIP() << "the world as one tp group (<= 4 ranks)";
  const std::string dir = dp_runs::shared_temp_dir(*world), path = dir + "/tp.safetensors";
  std::unique_ptr<GPT> a = make_model(world);
  a->init_weights(5);
  run_steps(*a, 0, 3);
  CheckpointInfo info;
  info.step = 3;
  save_checkpoint_tp(path, *a, info, /*with_optimizer_state=*/true);
  world->barrier();
  const std::vector<float> straight = run_steps(*a, 3, 6);

  // The single-rank model reads the whole tensors: the tp ranks' shards, placed.
  std::unique_ptr<GPT> one = make_model(nullptr);
  load_checkpoint(path, *one, /*with_optimizer_state=*/true);
  std::unique_ptr<GPT> b = make_model(world);
  b->init_weights(99);  // overwritten by the load
  load_checkpoint_tp(path, *b, /*with_optimizer_state=*/true);
  for (ChunkKind k : {ChunkKind::PARAM, ChunkKind::ADAM_M, ChunkKind::ADAM_V})
    expect_shard_of(*b, *one, k, "loaded shard vs the single-rank load");
  const std::vector<float> resumed = run_steps(*b, 3, 6);
  EXPECT_EQ(std::memcmp(resumed.data(), straight.data(), 3 * sizeof(float)), 0)
      << "resumed losses differ";
  for (int c = 0; c < a->store().layout().num_chunks(); ++c) {  // the same layout
    const Tensor pa = a->store().chunk(ChunkKind::PARAM, c);
    EXPECT_EQ(std::memcmp(b->store().chunk(ChunkKind::PARAM, c).data, pa.data, pa.nbytes()), 0)
        << "resumed vs straight parameters, chunk " << c;
  }

  // A different tp: groups of 2 of the 4 ranks load the same file.
  if (world->size() == 4) {
    const std::shared_ptr<ProcessGroup> half = world->split(world->rank() / 2, world->rank());
    std::unique_ptr<GPT> c = make_model(half);
    load_checkpoint_tp(path, *c, /*with_optimizer_state=*/true);
    expect_shard_of(*c, *one, ChunkKind::PARAM, "tp 4 -> 2");
    expect_shard_of(*c, *one, ChunkKind::ADAM_V, "tp 4 -> 2");
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

TEST(EngineTensorParallelCheckpoint, ZeroSlicedStoreWithoutTheDpGroupIsRefused) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() != 4) GTEST_SKIP() << "tp 2 x dp 2";
  Topology mesh(world, MeshShape{.tp = 2, .dp = 2});
  ModelOptions mo;
  mo.tp = mesh.group_ptr(MeshAxis::TP);
  mo.group_size = 2;
  mo.store.group_rank = mesh.coord().dp;
  mo.store.sliced_kinds = zero_sliced_kinds(1);
  GPT model(tiny_config(), ActivationPolicy::SAVE_ALL, mo);
  const std::string dir = dp_runs::shared_temp_dir(*world);
  try {
    save_checkpoint_tp(dir + "/z.safetensors", model, {}, true);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ZeRO-sliced"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/z.safetensors"));
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace ckpt
