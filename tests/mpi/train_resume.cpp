// The resume matrix (run on 4 ranks): for every configuration of the equivalence suite, with
// the default thresholds and buckets (the ZeRO-3 resume once loaded stale weights because every
// test set stage3_param_persistence_threshold to 0), a run that trains 20 steps, checkpoints and
// goes on to 40 is the reference; a second run resumes the checkpoint and trains the last 20.
//
//   * on the same layout the 20 resumed steps' losses and the final validation loss equal the
//     reference's bitwise;
//   * on another layout (another dp degree, ZeRO stage, offload, tp size, pipeline stages and
//     schedule) with the same global batch, to 1e-5 (sums in another order).
//
// Every layout keeps the loader's batch (data-parallel ranks x micro-batch) at 6 sequences and
// the global batch at 12, so the data order is the same everywhere; dropout 0.1 (masks keyed by
// global coordinates). A checkpoint of a delayed-update run (DPU) flushes the update in flight,
// and the reference is that run, so DPU is compared with itself through the flush.
// The same through SIGTERM: on the same layout, a run asked to stop (preemption.h) during step
// 20 stops there with model_step20.ckpt, and that checkpoint resumes bitwise too (the signal
// itself: tests/mpi/support/reliability.sh, preempt).
#include <gtest/gtest.h>

#include <filesystem>

#include "dp_runs.h"
#include "mpi_test.h"
#include "tide/comm/local_process_group.h"
#include "tide/train/preemption.h"

using namespace tide;
using namespace tide::dp_runs;

namespace {

constexpr int kHalf = 20;  // steps before and after the checkpoint

struct Layout {
  std::string name;
  int ranks;
  int micro, accum;  // micro x accum x data-parallel ranks = 12
  std::vector<std::string> keys;
};

// `what`: the layout's extra keys in a word or two (test names).
Layout dp(int ranks, int stage, const std::string& what = "", std::vector<std::string> keys = {}) {
  keys.push_back(fmt::format("zero_optimization.stage={}", stage));
  return {fmt::format("dp{} zero{}{}", ranks, stage, what.empty() ? "" : " " + what), ranks,
          6 / ranks, 2, keys};
}

Layout pp(int ranks, const std::string& schedule, int zero = 0) {
  const int replicas = ranks / 2;
  std::vector<std::string> keys = {"pipeline.stages=2", "pipeline.schedule=" + schedule,
                                   fmt::format("zero_optimization.stage={}", zero)};
  if (schedule == "interleaved") keys.push_back("pipeline.virtual_stages=2");
  return {fmt::format("pp2 x dp{} {} zero{}", replicas, schedule, zero), ranks, 6 / replicas, 2,
          keys};
}

Layout tp(int ranks, int stage, bool sp) {
  const int replicas = ranks / 2;
  std::vector<std::string> keys = {"tensor_parallel.size=2",
                                   fmt::format("tensor_parallel.sequence_parallel={}", sp),
                                   fmt::format("zero_optimization.stage={}", stage)};
  return {fmt::format("tp2{} x dp{} zero{}", sp ? " sp" : "", replicas, stage), ranks, 6 / replicas,
          2, keys};
}

TrainConfig config(const std::string& shard, const std::string& out, const Layout& l,
                   const std::string& resume) {
  std::vector<std::string> o = {"data.train=" + shard,
                                "data.val=" + shard,
                                "out_dir=" + out,
                                "model.vocab_size=" + std::to_string(kVocab),
                                "model.n_layer=4",
                                "model.n_head=2",
                                "model.n_embd=32",
                                "model.dropout=0.1",
                                "seq_len=" + std::to_string(kSeqLen),
                                "train_micro_batch_size_per_gpu=" + std::to_string(l.micro),
                                "gradient_accumulation_steps=" + std::to_string(l.accum),
                                "train_steps=" + std::to_string(2 * kHalf),
                                "eval.sequences=7",
                                "data.shuffle=true",
                                "optimizer.params.lr=3e-3",
                                "threads=1",
                                "log.progress=false"};
  o.insert(o.end(), l.keys.begin(), l.keys.end());
  if (!resume.empty()) o.push_back("checkpoint.resume=" + resume);
  return load_train_config("", o);
}

struct Case {
  Layout written, resumed;
  bool same() const { return written.name == resumed.name && written.ranks == resumed.ranks; }
};

std::string case_name(const Case& c) {
  return c.same() ? c.written.name : c.written.name + " -> " + c.resumed.name;
}

std::vector<Case> cases() {
  const std::string offload = "zero_optimization.offload_optimizer.device=cpu";
  const Layout zero3_2 = dp(2, 3), zero3_3 = dp(3, 3);
  std::vector<Layout> same = {
      dp(2, 0), dp(2, 1), dp(2, 2), zero3_2, zero3_3,
      // Some chunks persistent, the rest gathered on use.
      dp(2, 3, "some persistent", {"zero_optimization.stage3_param_persistence_threshold=3000"}),
      dp(2, 2, "offload", {offload}),
      dp(2, 2, "offload dpu",
         {"zero_optimization.offload_optimizer.delayed_update=true", offload,
          "zero_optimization.offload_optimizer.dpu_warmup_steps=5"}),
      dp(2, 3, "offload_param", {"zero_optimization.offload_param.device=cpu", offload}),
      dp(2, 3, "auto placement",
         {"placement.policy=auto", "placement.device_memory_limit=1000000"}),
      tp(2, 1, false), tp(2, 0, true), tp(4, 3, true), pp(2, "1f1b"), pp(2, "interleaved"),
      pp(2, "zb-h1"), pp(2, "zb-h2"), pp(2, "zb-auto"), pp(2, "zb-v"), pp(4, "1f1b", 1),
      pp(4, "zb-h1", 2)};
  std::vector<Case> out;
  for (const Layout& l : same) out.push_back({l, l});
  // ZeRO-3 on other degrees, and other stages and pipelines resumed into ZeRO-3.
  out.push_back({zero3_2, zero3_3});
  out.push_back({zero3_3, zero3_2});
  out.push_back({zero3_2, dp(1, 3)});
  out.push_back({dp(2, 1), zero3_2});
  out.push_back({pp(2, "1f1b"), zero3_3});
  out.push_back({pp(4, "zb-h1", 2), zero3_2});
  out.push_back({zero3_3, dp(2, 2, "offload", {offload})});
  // Tensor parallelism's whole-model file into other layouts, and sharded directories into tp.
  const Layout tp_zero3 = tp(4, 3, true);
  out.push_back({tp_zero3, dp(2, 1)});
  out.push_back({tp_zero3, pp(2, "1f1b")});
  out.push_back({tp_zero3, dp(1, 0)});
  out.push_back({zero3_2, tp(2, 1, false)});
  out.push_back({pp(2, "zb-h1"), tp_zero3});
  out.push_back({zero3_2, pp(2, "zb-v")});
  return out;
}

class Resume : public testing::TestWithParam<Case> {};

TEST_P(Resume, TwentyPlusTwentyStepsEqualFortyStraight) {
  const Case& c = GetParam();
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const int rank = world->rank();
  ASSERT_EQ(world->size(), 4) << "the resume matrix runs on 4 ranks";
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  // The first `n` ranks of the world, or nullptr on the others (collective over the world).
  auto first = [&](int n) -> std::shared_ptr<ProcessGroup> {
    if (n == 1) return rank == 0 ? std::make_shared<LocalProcessGroup>() : nullptr;
    return world->split(rank < n ? 0 : -1, rank);
  };
  const std::shared_ptr<ProcessGroup> w = first(c.written.ranks), r = first(c.resumed.ranks);
  const std::string mid = dir + "/w/mid.ckpt";
  std::vector<float> want;
  float want_val = 0;
  if (w) {
    Trainer t(config(shard, dir + "/w", c.written, ""), w);
    while (t.step() < kHalf) t.train_step();
    t.save("mid.ckpt");
    while (t.step() < 2 * kHalf) want.push_back(t.train_step().loss);
    want_val = t.evaluate();
  }
  // The same layout through SIGTERM: a run asked to stop on its last rank during step 20
  // (preemption.h) stops there and writes model_step20.ckpt (Trainer::run's path).
  const std::string stopped = dir + "/s/model_step20.ckpt";
  if (w && c.same()) {
    Trainer t(config(shard, dir + "/s", c.written, ""), w);
    while (t.step() < kHalf - 1) t.train_step();
    if (w->rank() == w->size() - 1) request_stop();
    t.run();
    clear_stop_request();
    EXPECT_TRUE(t.stop_agreed());
    EXPECT_EQ(t.step(), kHalf);
  }
  world->barrier();  // the checkpoints are committed before anyone reads them
  for (const std::string& from : {mid, stopped}) {
    if (from == stopped && !c.same()) break;
    std::vector<float> got;
    float got_val = 0;
    if (r) {
      Trainer t(config(shard, dir + "/r", c.resumed, from), r);
      EXPECT_EQ(t.step(), kHalf);
      while (t.step() < 2 * kHalf) got.push_back(t.train_step().loss);
      got_val = t.evaluate();
    }
    if (rank != 0) continue;  // rank 0 is in both groups
    SCOPED_TRACE("resumed from " + from);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (c.same())
        EXPECT_EQ(got[i], want[i]) << "step " << kHalf + i + 1;
      else
        EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "step " << kHalf + i + 1;
    }
    if (c.same())
      EXPECT_EQ(got_val, want_val) << "validation loss";
    else
      EXPECT_NEAR(got_val, want_val, 1e-5 * want_val) << "validation loss";
  }
  world->barrier();
  if (rank == 0) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Matrix, Resume, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& info) {
                           std::string n = fmt::format("{}_{}", info.index, case_name(info.param));
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
