// ZeRO-Offload's bad input at the Engine (the Trainer's refusals are in test_estimate_setup.cpp)
// and the per-tensor norm partials it sums as chunks arrive.
// Training equivalence, traffic and memory are in tests/mpi/train_offload.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "error_of.h"
#include "test_files.h"
#include "tide/comm/local_process_group.h"
#include "tide/config/config.h"
#include "tide/core/rng.h"
#include "tide/data/shard.h"
#include "tide/exec/engine.h"
#include "tide/model/gpt.h"
#include "tide/optim/grad_norm.h"
#include "tide/parallel/offload_policy.h"
#include "tide/parallel/optimizer_step.h"
#include "tide/parallel/tensor_grad_sums.h"
#include "tide/train/trainer.h"

using namespace tide;
using tide::test::error_of;

namespace {

TrainConfig tiny() {
  return parse_train_config(
      {{"model", {{"n_layer", 2}, {"n_embd", 32}, {"n_head", 2}, {"vocab_size", 64}}},
       {"seq_len", 16},
       {"train_micro_batch_size_per_gpu", 2}},
      /*check_paths=*/false);
}

std::string engine_error(int stage, bool separate_master) {
  const TrainConfig tc = tiny();
  ModelOptions o;
  o.store.sliced_kinds = zero_sliced_kinds(stage);
  o.store.separate_master = separate_master;
  GPT gpt(tc.model, tc.activation_policy, o);
  ZeroSettings z;
  z.stage = stage;
  z.offload_optimizer.enabled = true;
  return error_of([&] {
    Engine e(gpt, std::make_shared<LocalProcessGroup>(), data_parallel_schedule(1), 2, 16,
             OptimizerSettings{}, z);
  });
}

TEST(OffloadErrors, StageZeroAndAStoreWithoutItsOwnMasterAreRefused) {
  EXPECT_EQ(engine_error(0, true),
            "zero_optimization.offload_optimizer.device=cpu needs zero_optimization.stage 1, 2 "
            "or 3 (ZeRO-Offload partitions the optimizer state it offloads, as DeepSpeed does); "
            "set zero_optimization.stage to 1 or more");
  EXPECT_EQ(engine_error(1, false),
            "ZeRO-Offload needs the fp32 master weights in their own chunks on the host: build "
            "the model with ModelOptions::store.separate_master = true");
  EXPECT_EQ(engine_error(2, true), "");
}

// The offload thread sums each tensor's part of the owned slice (after the division by N): rank 1
// of 2 at ZeRO-2, where tensors straddle the slice bounds. Oracle: the elements of each tensor
// inside the slice, picked by their chunk offsets, divided and summed with grad_norm_squared here;
// bitwise equal, and 0 for tensors outside the slice.
TEST(OffloadNorm, PerTensorSumsOfTheOwnedSliceAreBitwiseTheDirectOnes) {
  const TrainConfig tc = tiny();
  ModelOptions o;
  o.group_size = 2;
  o.store.group_rank = 1;
  o.store.sliced_kinds = zero_sliced_kinds(2);
  o.store.separate_master = true;
  GPT gpt(tc.model, tc.activation_policy, o);
  ChunkStore& store = gpt.store();
  const ChunkLayout& lay = store.layout();
  const PhiloxStream rng{5, 6};
  uint64_t k = 0;
  for (int c = 0; c < lay.num_chunks(); ++c) {
    const Tensor g = store.slice(ChunkKind::GRAD, c);
    for (int64_t i = 0; i < g.numel(); ++i)
      g.f32()[i] = static_cast<float>(rng.uint(k++) % 20001) * 1e-3f - 10.0f;
  }
  // What the slices hold before the policy divides them (the policy reads them as they are).
  std::vector<std::vector<float>> before;
  for (int c = 0; c < lay.num_chunks(); ++c) {
    const Tensor g = store.slice(ChunkKind::GRAD, c);
    before.emplace_back(g.f32(), g.f32() + g.numel());
  }
  HostAllocator host;
  OffloadPolicy policy(store, 2, OffloadSettings{.enabled = true}, 1, host);
  policy.begin_step(nullptr, AdamWStep{});
  for (int c = lay.num_chunks(); c-- > 0;) policy.on_reduced(c);  // backward order
  policy.finish_gradients();
  const std::span<const double> sums = policy.tensor_sums();
  ASSERT_EQ(static_cast<int>(sums.size()), lay.num_tensors());
  int inside = 0, outside = 0, straddling = 0;
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const TensorSlot& s = lay.slot(id);
    const int64_t S = lay.slice_elems(s.chunk), lo = S;  // rank 1: [S, 2S) of the chunk
    std::vector<float> part;
    for (int64_t i = s.offset; i < s.offset + s.numel; ++i)
      if (i >= lo && i < lo + S) part.push_back(before[s.chunk][i - lo] / 2.0f);
    const double expected =
        grad_norm_squared(part.data(), DType::F32, static_cast<int64_t>(part.size()));
    EXPECT_EQ(std::memcmp(&sums[id], &expected, sizeof(double)), 0)
        << s.name << ": " << sums[id] << " vs " << expected;
    if (part.empty())
      ++outside;
    else if (static_cast<int64_t>(part.size()) < s.numel)
      ++straddling;
    else
      ++inside;
  }
  EXPECT_GT(inside, 0);
  EXPECT_GT(outside, 0);
  EXPECT_GT(straddling, 0);
}

// The one-step delayed update (DPU) against a reference built from plain parts: model A (no
// offload) only computes each step's loss and gradients on parameters copied in from model B;
// B holds the parameters and Adam state and takes the updates, each step's one step late
// after the warm-up (plan_update and adamw_step, the synchronous update). DPU's losses and, once
// its pending update is flushed, its parameters equal the reference's bitwise; and they differ from
// the synchronous offloaded run's, so the delay is really there.
// `tc`: the model (GPT-2 or a Llama one).
void expect_dpu_equals_one_step_late_reference(const TrainConfig& tc) {
  constexpr int B = 2, T = 16, kSteps = 7, kWarmup = 2;
  OptimizerSettings opt;
  opt.adamw.weight_decay = 0.1;
  opt.lr.type = LrScheduleType::CONSTANT;
  opt.lr.lr = 1e-2;
  opt.grad_clip = 1.0f;
  const int vocab = tc.model.vocab_size;
  int64_t cur = 0;  // the step being filled
  auto fill = [&](int mb, int32_t* in, int32_t* tg) {
    for (int i = 0; i < B * T; ++i) {
      in[i] = static_cast<int32_t>((i * 7 + mb * 3 + cur * 5) % vocab);
      tg[i] = static_cast<int32_t>((in[i] * 5 + 3) % vocab);
    }
  };
  auto offloaded = [&](bool delayed, std::vector<float>& losses) {
    ModelOptions o;
    o.store.sliced_kinds = zero_sliced_kinds(1);
    o.store.separate_master = true;
    auto gpt = std::make_unique<GPT>(tc.model, tc.activation_policy, o);
    gpt->init_weights(7);
    ZeroSettings z;
    z.stage = 1;
    z.offload_optimizer.enabled = true;
    z.offload_optimizer.delayed_update = delayed;
    z.offload_optimizer.dpu_warmup_steps = kWarmup;
    Engine e(*gpt, std::make_shared<LocalProcessGroup>(), data_parallel_schedule(1), B, T, opt, z);
    for (cur = 0; cur < kSteps; ++cur) losses.push_back(e.step(cur, 1, fill).loss);
    e.flush_update();
    return gpt;
  };
  std::vector<float> dpu, sync;
  const auto dpu_model = offloaded(true, dpu);
  offloaded(false, sync);

  GPT a(tc.model, tc.activation_policy), b(tc.model, tc.activation_policy);
  a.init_weights(7);
  b.init_weights(7);
  Engine ea(a, std::make_shared<LocalProcessGroup>(), data_parallel_schedule(1), B, T, opt);
  const ChunkLayout& lay = a.store().layout();
  using Grads = std::vector<std::vector<float>>;
  auto apply = [&](const Grads& g, int64_t step) {  // B takes step `step`'s update from g
    // The executor's norm: per-tensor sums of squares added in the model's tensor order.
    std::vector<double> sums(static_cast<size_t>(lay.num_tensors()), 0.0);
    for (int c = 0; c < lay.num_chunks(); ++c) {
      const Tensor t = b.store().chunk(ChunkKind::GRAD, c);
      std::memcpy(t.data, g[c].data(), t.nbytes());
      tensor_grad_sums(lay, c, t, 0, sums);
    }
    double norm2 = 0;
    for (double v : sums) norm2 += v;
    const UpdatePlan plan = plan_update(opt, step, std::sqrt(norm2));
    AdamWHyper h = opt.adamw;
    h.lr = plan.lr;
    adamw_step(b.op(), b.store(), h, AdamWStep{step + 1, plan.clip});
  };
  std::vector<float> ref;
  Grads pending;
  for (cur = 0; cur < kSteps; ++cur) {
    for (int c = 0; c < lay.num_chunks(); ++c)
      std::memcpy(a.store().chunk(ChunkKind::PARAM, c).data,
                  b.store().chunk(ChunkKind::PARAM, c).data,
                  a.store().chunk(ChunkKind::PARAM, c).nbytes());
    ref.push_back(ea.step(cur, 1, fill).loss);  // A's own update is overwritten next step
    Grads g(lay.num_chunks());
    for (int c = 0; c < lay.num_chunks(); ++c) {
      const Tensor t = a.store().chunk(ChunkKind::GRAD, c);
      g[c].assign(t.f32(), t.f32() + t.numel());
    }
    if (cur < kWarmup) {
      apply(g, cur);
      continue;
    }
    if (!pending.empty()) apply(pending, cur - 1);
    pending = std::move(g);
  }
  apply(pending, kSteps - 1);  // what flush_update() applies
  for (int s = 0; s < kSteps; ++s)
    EXPECT_EQ(std::memcmp(&dpu[s], &ref[s], 4), 0)
        << "step " << s + 1 << ": " << dpu[s] << " vs " << ref[s];
  for (int c = 0; c < lay.num_chunks(); ++c)
    EXPECT_EQ(std::memcmp(dpu_model->store().chunk(ChunkKind::PARAM, c).data,
                          b.store().chunk(ChunkKind::PARAM, c).data,
                          b.store().chunk(ChunkKind::PARAM, c).nbytes()),
              0)
        << "chunk " << c << " after the flush";
  // Synchronous until the first update that DPU delays takes effect: step kWarmup + 2.
  for (int s = 0; s <= kWarmup; ++s) EXPECT_EQ(dpu[s], sync[s]) << "step " << s + 1;
  EXPECT_NE(dpu[kWarmup + 1], sync[kWarmup + 1]);
}

TEST(OffloadDelayedUpdate, EqualsAReferenceThatAppliesEachUpdateOneStepLate) {
  expect_dpu_equals_one_step_late_reference(tiny());
}

// The same on a Llama model (issue #28): grouped-query attention, a qkv bias, RMSNorm (no
// bias tensors), an untied head: the tensor list the offload thread's norm partials walk.
TEST(OffloadDelayedUpdate, EqualsTheOneStepLateReferenceOnALlamaModel) {
  expect_dpu_equals_one_step_late_reference(
      parse_train_config({{"model",
                           {{"family", "llama"},
                            {"n_layer", 2},
                            {"n_embd", 32},
                            {"n_head", 2},
                            {"n_kv_head", 1},
                            {"intermediate_size", 48},
                            {"qkv_bias", true},
                            {"tie_word_embeddings", false},
                            {"vocab_size", 64}}},
                          {"seq_len", 16},
                          {"train_micro_batch_size_per_gpu", 2}},
                         /*check_paths=*/false));
}

// tide train's metrics.jsonl carries the offload counters of every logged step (and the
// progress line their short form); without offload they are absent.
TEST(OffloadMetrics, EveryTrainingRecordCarriesTheCounters) {
  for (bool offload : {true, false}) {
    const std::string dir = test::temp_dir(offload ? "offload_metrics" : "offload_metrics_off");
    std::vector<uint16_t> tokens(2000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 7 % 50);
    write_token_shard(dir + "/train.bin", std::span<const uint16_t>(tokens));
    Trainer t(load_train_config(
        "",
        {"data.train=" + dir + "/train.bin", "model.vocab_size=50", "model.n_layer=2",
         "model.n_head=2", "model.n_embd=16", "seq_len=8", "train_steps=3", "log.interval=1",
         "out_dir=" + dir, "log.progress=false", "zero_optimization.stage=2",
         std::string("zero_optimization.offload_optimizer.device=") + (offload ? "cpu" : "none")}));
    t.run();
    const uint64_t psi = static_cast<uint64_t>(t.model().store().layout().total_elems());
    std::ifstream f(dir + "/metrics.jsonl");
    int records = 0;
    for (std::string line; std::getline(f, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!j.contains("loss")) continue;
      ++records;
      EXPECT_EQ(j.contains("offload_wait_seconds"), offload) << line;
      if (!offload) continue;
      EXPECT_EQ(j["offload_bytes_to_host"].get<uint64_t>(), 4 * psi) << line;
      EXPECT_EQ(j["offload_bytes_to_device"].get<uint64_t>(), 4 * psi) << line;
      EXPECT_EQ(j["offload_moves"].get<int>(), 2 * t.model().store().layout().num_chunks());
      for (const char* k :
           {"offload_copy_seconds", "offload_adam_seconds", "offload_hidden_seconds"})
        EXPECT_GE(j[k].get<double>(), 0.0) << k;
    }
    EXPECT_EQ(records, 3);
  }
}

}  // namespace
