// Optimizer post-validation in the pipeline executor (PipelineEngine, pipeline_engine.h): each
// stage runs AdamW before the global gradient norm arrives and rolls the step back when the
// norm says it had to be clipped or skipped. The oracle is the synchronous update of the same
// engine (set_post_validation(false): wait for the norm, then AdamW once); the two runs must be
// bitwise equal (losses, norms, every parameter of every stage), on p = world size stages
// (2, 3, 4: where 12 layers divide), ZB-H1 with 2p micro-batches, dropout 0.1:
//
//   * ClippingActive: grad_clip below most steps' norms: those steps roll back and redo.
//   * NonFiniteGradientSkipsTheStep: a NaN put into one stage's gradient at one step: the step
//     is skipped on every stage (its parameters are the step before's), and with skipping off
//     both updates throw, leaving the parameters untouched.
//   * NoRollbackWithoutClipping: the common case: no step rolls back.
//   * TracedSpans: the optimistic update, the wait for the norm and a rollback/redo are
//     "optimizer" spans of the trace.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <span>
#include <string>

#include "mpi_test.h"
#include "test_batches.h"
#include "tide/core/rng.h"
#include "tide/core/trace.h"
#include "tide/exec/engine.h"
#include "tide/exec/pipeline_engine.h"
#include "tide/pipeline/generators.h"

using namespace tide;

namespace {

constexpr int kB = 2, kT = 16, kSteps = 20, kVocab = 37;
constexpr uint64_t kInitSeed = 23, kRunSeed = 9;
constexpr int kNanStep = 2;  // the step whose gradient gets a NaN

GPTConfig config() {
  GPTConfig c;
  c.n_layer = 12;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = kVocab;
  c.max_seq_len = kT;
  c.dropout = 0.1f;
  return c;
}

// Micro-batch mb of step s: tokens next = 3*prev+1 (mod V) with 25% noise.
void fill(int64_t s, int mb, int32_t* inputs, int32_t* targets) {
  const PhiloxStream rng{31, static_cast<uint64_t>(s * 1000 + mb)};
  test::fill_noisy_chain(rng, kB, kT, kVocab, 3, 1, inputs, targets);
}

struct Setup {
  bool post_validate = true;
  float grad_clip = 1.0f;
  bool nan = false;  // inject a NaN gradient at kNanStep on stage 1
  bool skip_non_finite = true;
  bool traced = false;
};

struct StageRun {
  std::vector<float> losses;
  std::vector<double> norms;
  std::vector<int> skipped, rollbacks;
  std::vector<std::vector<float>> params;  // per step: this stage's parameters after it
  std::vector<std::map<std::string, int>> optimizer_spans;  // per step (traced runs)
  bool threw = false;
  std::string error;
};

// This stage's parameters, every tensor in layout order.
std::vector<float> stage_params(GPT& gpt) {
  const ChunkLayout& lay = gpt.store().layout();
  std::vector<float> all;
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const Tensor p = gpt.store().tensor(ChunkKind::PARAM, id);
    all.insert(all.end(), p.f32(), p.f32() + p.numel());
  }
  return all;
}

StageRun run(const Setup& setup) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  const int p = world->size(), M = 2 * p;
  ModelOptions o;
  o.pp = p;
  o.stage = world->rank();
  GPT gpt(config(), ActivationPolicy::SAVE_ALL, o);
  gpt.init_weights(kInitSeed);
  OptimizerSettings opt;
  opt.adamw.weight_decay = 0.1;
  opt.lr.type = LrScheduleType::CONSTANT;
  opt.lr.lr = 3e-3;
  opt.grad_clip = setup.grad_clip;
  opt.skip_non_finite = setup.skip_non_finite;
  PipelineEngine engine(gpt, world, pipeline::zb_h1(p, M), kB, kT, opt);
  engine.set_post_validation(setup.post_validate);
  if (setup.nan)
    engine.set_gradient_hook([&](int64_t step, std::span<GPT* const> models) {
      if (step != kNanStep || world->rank() != 1) return;
      models[0]->store().tensor(ChunkKind::GRAD, 0).f32()[3] =
          std::numeric_limits<float>::quiet_NaN();
    });
  StageRun r;
  for (int64_t s = 0; s < kSteps; ++s) {
    Tracer tracer(world->rank());
    StepStats st;
    try {
      st = engine.step(
          s, kRunSeed, [&](int mb, int32_t* in, int32_t* tg) { fill(s, mb, in, tg); },
          setup.traced ? &tracer : nullptr);
    } catch (const Error& e) {
      r.threw = true;
      r.error = e.what();
      r.params.push_back(stage_params(gpt));
      return r;
    }
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
    r.skipped.push_back(st.skipped);
    r.rollbacks.push_back(st.rollbacks);
    r.params.push_back(stage_params(gpt));
    std::map<std::string, int> spans;
    for (const TraceEvent& e : tracer.events())
      if (e.cat == "optimizer") ++spans[e.name];
    r.optimizer_spans.push_back(spans);
  }
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Post-validated and synchronous runs: bitwise the same losses, norms and parameters.
void expect_bitwise(const StageRun& post, const StageRun& sync) {
  ASSERT_EQ(post.losses.size(), sync.losses.size());
  for (size_t s = 0; s < post.losses.size(); ++s) {
    EXPECT_EQ(std::memcmp(&post.losses[s], &sync.losses[s], sizeof(float)), 0)
        << "loss, step " << s << ": " << post.losses[s] << " vs " << sync.losses[s];
    EXPECT_EQ(std::memcmp(&post.norms[s], &sync.norms[s], sizeof(double)), 0)
        << "grad norm, step " << s << ": " << post.norms[s] << " vs " << sync.norms[s];
    EXPECT_TRUE(same_bits(post.params[s], sync.params[s]))
        << "stage " << mpi_test::world().rank() << " parameters after step " << s;
    EXPECT_EQ(post.skipped[s], sync.skipped[s]) << "step " << s;
  }
}

bool runs_here() {
  return config().n_layer % mpi_test::world().size() == 0;
}

}  // namespace

TEST(PipelinePostValidation, ClippingActive) {
  if (!runs_here()) GTEST_SKIP() << "12 layers do not divide over the stages";
  omp_set_num_threads(1);
  // This model's norms are about 0.5-1.9 over these steps (printed on failure below): 0.6
  // clips most steps but not all, so both outcomes of the validation run.
  const StageRun post = run({.post_validate = true, .grad_clip = 0.6f});
  const StageRun sync = run({.post_validate = false, .grad_clip = 0.6f});
  expect_bitwise(post, sync);
  int clipped = 0;
  for (int s = 0; s < kSteps; ++s) {
    const bool clips = post.norms[s] > 0.6;
    clipped += clips;
    EXPECT_EQ(post.rollbacks[s], clips ? 1 : 0) << "step " << s << ", norm " << post.norms[s];
    EXPECT_EQ(sync.rollbacks[s], 0) << "the synchronous update never rolls back";
  }
  EXPECT_GE(clipped, 3) << "clipping must be active on several steps; norms "
                        << testing::PrintToString(post.norms);
  // Clipping changed the training (else the rollbacks compared nothing).
  const StageRun unclipped = run({.post_validate = true, .grad_clip = 0.0f});
  EXPECT_FALSE(same_bits(unclipped.params.back(), post.params.back()));
}

TEST(PipelinePostValidation, NonFiniteGradientSkipsTheStep) {
  if (!runs_here()) GTEST_SKIP() << "12 layers do not divide over the stages";
  omp_set_num_threads(1);
  // Clipping inactive (norms < 2), so the NaN is the only reason to roll back.
  const StageRun post = run({.post_validate = true, .grad_clip = 100.0f, .nan = true});
  const StageRun sync = run({.post_validate = false, .grad_clip = 100.0f, .nan = true});
  expect_bitwise(post, sync);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(post.skipped[s], s == kNanStep) << "step " << s;
    EXPECT_EQ(std::isfinite(post.norms[s]), s != kNanStep) << "step " << s;
    EXPECT_EQ(post.rollbacks[s], s == kNanStep ? 1 : 0) << "step " << s;
  }
  // Skipped on this stage too (every rank checks its own): nothing moved at kNanStep, and the
  // steps after it trained (finite parameters that change).
  EXPECT_TRUE(same_bits(post.params[kNanStep], post.params[kNanStep - 1]));
  EXPECT_FALSE(same_bits(post.params[kNanStep + 1], post.params[kNanStep]));
  for (float v : post.params.back()) ASSERT_TRUE(std::isfinite(v));

  // Skipping off: both updates throw at kNanStep with the parameters of the step before.
  for (bool pv : {true, false}) {
    const StageRun r =
        run({.post_validate = pv, .grad_clip = 100.0f, .nan = true, .skip_non_finite = false});
    EXPECT_TRUE(r.threw) << "post_validate " << pv;
    EXPECT_NE(r.error.find("not finite"), std::string::npos) << r.error;
    ASSERT_EQ(r.params.size(), static_cast<size_t>(kNanStep + 1));
    EXPECT_TRUE(same_bits(r.params.back(), post.params[kNanStep - 1])) << "post_validate " << pv;
  }
}

TEST(PipelinePostValidation, NoRollbackWithoutClipping) {
  if (!runs_here()) GTEST_SKIP() << "12 layers do not divide over the stages";
  omp_set_num_threads(1);
  const StageRun post = run({.post_validate = true, .grad_clip = 100.0f});
  const StageRun sync = run({.post_validate = false, .grad_clip = 100.0f});
  expect_bitwise(post, sync);
  for (int s = 0; s < kSteps; ++s) {
    ASSERT_LT(post.norms[s], 100.0);
    EXPECT_EQ(post.rollbacks[s], 0) << "step " << s;
    EXPECT_EQ(post.skipped[s], 0) << "step " << s;
  }
}

TEST(PipelinePostValidation, TracedSpans) {
  if (!runs_here()) GTEST_SKIP() << "12 layers do not divide over the stages";
  omp_set_num_threads(1);
  const StageRun r = run({.post_validate = true, .grad_clip = 0.6f, .traced = true});
  for (int s = 0; s < kSteps; ++s) {
    std::map<std::string, int> spans = r.optimizer_spans[s];
    // The snapshot is copied in pieces while the stage waits for messages, the rest (if any)
    // before the optimistic update: one span or more.
    EXPECT_GE(spans["save optimizer state"], 1) << "step " << s;
    spans.erase("save optimizer state");
    std::map<std::string, int> want = {
        {"grad norm", 1}, {"optimizer (optimistic)", 1}, {"wait grad norm", 1}};
    if (r.rollbacks[s]) want["rollback"] = want["optimizer (redo)"] = 1;
    EXPECT_EQ(spans, want) << "step " << s;
  }
}
