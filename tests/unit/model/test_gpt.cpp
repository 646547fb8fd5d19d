// The GPT model against an independent reference (JAX fixtures), finite differences of the
// whole model, and the activation policies against each other.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fixture.h"
#include "grad_check.h"
#include "tide/model/gpt.h"

using namespace tide;

namespace {

void load_params(GPT& gpt, const std::map<std::string, std::vector<float>>& params) {
  const auto& slots = gpt.store().layout().slots();
  for (size_t id = 0; id < slots.size(); ++id) {
    const auto& v = params.at(slots[id].name);
    ASSERT_EQ(static_cast<int64_t>(v.size()), slots[id].numel) << slots[id].name;
    std::memcpy(gpt.store().tensor(ChunkKind::PARAM, static_cast<int>(id)).data, v.data(),
                v.size() * 4);
  }
}

// A small model with dropout, for the policy and reproducibility tests.
GPTConfig small_config(float dropout) {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 37;
  c.max_seq_len = 10;
  c.dropout = dropout;
  return c;
}

void fill_batch(MicroBatch& mb, int V, uint64_t seed) {
  PhiloxStream rng{seed, 7};
  for (int64_t i = 0; i < mb.tokens.numel(); ++i) {
    mb.tokens.i32()[i] = static_cast<int32_t>(rng.uint(2 * i) % V);
    mb.targets.i32()[i] = static_cast<int32_t>(rng.uint(2 * i + 1) % V);
  }
}

// Every gradient, tensor after tensor in layout order.
std::vector<float> all_grads(GPT& gpt) {
  std::vector<float> g;
  for (size_t id = 0; id < gpt.store().layout().slots().size(); ++id) {
    const Tensor t = gpt.store().tensor(ChunkKind::GRAD, static_cast<int>(id));
    g.insert(g.end(), t.f32(), t.f32() + t.numel());
  }
  return g;
}

}  // namespace

// The fixture's weights are large (N(0, 0.5^2), random LayerNorms; see tools/gen_fixtures.py),
// so the model's details show: C++ and JAX gradients agree to ~2e-6 per tensor, while exact-erf
// GELU instead of GPT-2's tanh GELU moves every tensor's gradient by 1.6e-4 to 2.2e-3.
TEST(GPT, LossAndGradientsMatchJaxReference) {
  test::Fixture fx;
  GPT gpt(fx.config, ActivationPolicy::SAVE_ALL);
  load_params(gpt, fx.tensors("params"));
  auto mb = gpt.make_micro_batch(fx.B, fx.T);
  fx.batch(0, mb->tokens.i32(), mb->targets.i32());
  const float loss = gpt.forward(*mb);
  EXPECT_NEAR(loss, fx.j["loss0"].get<double>(), 1e-4 * std::abs(fx.j["loss0"].get<double>()));
  gpt.store().zero(ChunkKind::GRAD, gpt.op());
  gpt.backward(*mb);
  const auto ref = fx.tensors("grads0");
  const auto& slots = gpt.store().layout().slots();
  for (size_t id = 0; id < slots.size(); ++id) {
    const Tensor g = gpt.store().tensor(ChunkKind::GRAD, static_cast<int>(id));
    EXPECT_LE(test::rel_error(g.f32(), ref.at(slots[id].name)), 1e-4)
        << "||grad - JAX|| / ||JAX|| of " << slots[id].name;
  }
}

TEST(GPT, ActivationPoliciesGiveBitwiseIdenticalGradients) {
  const GPTConfig cfg = small_config(0.2f);
  std::vector<std::vector<float>> grads;
  std::vector<float> losses;
  for (ActivationPolicy p :
       {ActivationPolicy::SAVE_ALL, ActivationPolicy::SELECTIVE, ActivationPolicy::FULL}) {
    GPT gpt(cfg, p);
    gpt.init_weights(5);
    auto mb = gpt.make_micro_batch(3, 7);
    fill_batch(*mb, cfg.vocab_size, 11);
    mb->seed = 99;
    mb->step = 3;
    losses.push_back(gpt.forward(*mb));
    gpt.backward(*mb);
    grads.push_back(all_grads(gpt));
  }
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(losses[i], losses[0]);
    ASSERT_EQ(grads[i].size(), grads[0].size());
    EXPECT_EQ(std::memcmp(grads[i].data(), grads[0].data(), grads[0].size() * 4), 0)
        << "policy " << i << " differs from save-all";
  }
  // Dropout really is on: a different step gives a different loss.
  GPT gpt(cfg, ActivationPolicy::SAVE_ALL);
  gpt.init_weights(5);
  auto mb = gpt.make_micro_batch(3, 7);
  fill_batch(*mb, cfg.vocab_size, 11);
  mb->seed = 99;
  mb->step = 4;
  EXPECT_NE(gpt.forward(*mb), losses[0]);
}

// ---- Finite differences of the whole model (the checker is in grad_check.h).

namespace {

// Parameters at which every tensor's gradient is large enough to check: GPT-2's N(0, 0.02)
// leaves attention nearly uniform (so c_attn's query/key gradients tiny) and the block
// LayerNorms barely used. Here: weights N(0, 0.3^2), biases N(0, 0.1^2), LayerNorm weights
// 1 + N(0, 0.2^2), LayerNorm biases N(0, 0.1^2).
void randomize_params(GPT& gpt, uint64_t seed) {
  const auto& slots = gpt.store().layout().slots();
  for (size_t id = 0; id < slots.size(); ++id) {
    const std::string& name = slots[id].name;
    const bool ln = name.find("ln_") != std::string::npos;
    const bool bias = name.ends_with(".bias");
    const double scale = ln ? (bias ? 0.1 : 0.2) : (bias ? 0.1 : 0.3);
    const double mean = ln && !bias ? 1.0 : 0.0;
    const PhiloxStream rng{seed, test::name_hash(name)};
    float* w = gpt.store().tensor(ChunkKind::PARAM, static_cast<int>(id)).f32();
    for (int64_t i = 0; i < slots[id].numel; ++i)
      w[i] = static_cast<float>(mean + scale * rng.normal(static_cast<uint64_t>(i)));
  }
}

// One OpenMP thread while it lives. A finite-difference check runs thousands of forward passes
// of a tiny model, where fork/join dominates: on a busy machine OpenMP's spinning threads make
// it ~15x slower. The kernels' results do not depend on the thread count.
struct OneThread {
  int before = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(before); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;
};

// A 2-layer model (28 tensors) with gradients computed for one batch, ready for the checker.
struct FdModel {
  OneThread one_thread;
  GPTConfig cfg;
  GPT gpt;
  std::unique_ptr<MicroBatch> mb;
  FdModel(float dropout, ActivationPolicy policy)
      : cfg(small_config(dropout)), gpt(cfg, policy), mb(gpt.make_micro_batch(3, 8)) {
    gpt.init_weights(3);
    randomize_params(gpt, 17);
    fill_batch(*mb, cfg.vocab_size, 5);
    mb->training = true;
    mb->seed = 99;  // dropout masks: a pure function of (seed, step, micro-batch, layer, site)
    mb->step = 2;
    gpt.store().zero(ChunkKind::GRAD, gpt.op());
    gpt.forward(*mb);
    gpt.backward(*mb);
  }
  test::GradChecker checker() {
    return test::GradChecker(gpt, [this] { return double(gpt.forward(*mb)); });
  }
};

void expect_gradients_match_finite_differences(FdModel& m) {
  test::GradChecker checker = m.checker();
  ASSERT_TRUE(checker.deterministic()) << "the loss differs between two identical evaluations";
  const auto probes = checker.check_all();
  const size_t n_tensors = m.gpt.store().layout().slots().size();
  std::vector<int> probes_of(n_tensors, 0);
  // Margins: how far each probe is from failing each condition (see grad_check.h).
  const double tol = checker.options().rel_tol;
  double worst = 0, noise_margin = INFINITY, smooth_margin = INFINITY;
  for (const auto& p : probes) {
    EXPECT_TRUE(p.failure.empty()) << p.failure << "\n  " << p.str();
    if (p.failure.empty()) ++probes_of[p.tensor];
    worst = std::max(worst, p.rel_error());
    noise_margin = std::min(noise_margin, tol / 5 * std::abs(p.numeric) / p.noise);
    smooth_margin = std::min(smooth_margin, tol / 2 * std::abs(p.numeric) / p.truncation());
    if (std::getenv("TIDE_FD_VERBOSE")) std::printf("%s\n", p.str().c_str());
  }
  for (size_t id = 0; id < n_tensors; ++id)
    EXPECT_EQ(probes_of[id], checker.options().top_k + checker.options().directions)
        << m.gpt.store().layout().slots()[id].name << " is not fully checked";
  std::printf(
      "%zu tensors, %zu probes, loss %.6f (noise %.2e): worst relative error %.2e "
      "(tolerance %.2f); margins: rounding %.1fx, truncation %.1fx\n",
      n_tensors, probes.size(), checker.loss0(), checker.measured_noise(), worst, tol, noise_margin,
      smooth_margin);
}

}  // namespace

TEST(GPT, WholeModelGradientMatchesFiniteDifferences) {
  FdModel m(0.0f, ActivationPolicy::SAVE_ALL);
  expect_gradients_match_finite_differences(m);
}

TEST(GPT, WholeModelGradientMatchesFiniteDifferencesWithDropout) {
  FdModel m(0.1f, ActivationPolicy::FULL);
  expect_gradients_match_finite_differences(m);
  // The masks are really on: another step draws other masks, hence another loss.
  const float loss = m.gpt.forward(*m.mb);
  m.mb->step = 3;
  EXPECT_NE(m.gpt.forward(*m.mb), loss);
}

// The check above can fail: multiplying any one tensor's gradient by 0, 2 or -1 (after
// backward, in the GRAD tensor) makes every probe of that tensor fail, while the same check
// passes on the true gradient.
TEST(GPT, FiniteDifferenceCheckRejectsWrongGradients) {
  FdModel m(0.0f, ActivationPolicy::SAVE_ALL);
  test::GradChecker checker = m.checker();
  ASSERT_TRUE(checker.deterministic());
  const auto& slots = m.gpt.store().layout().slots();
  double worst_right = 0, least_wrong = INFINITY;
  for (size_t id = 0; id < slots.size(); ++id) {
    const int i = static_cast<int>(id);
    for (const auto& p : checker.check_tensor(i)) {
      EXPECT_TRUE(p.failure.empty()) << p.failure << "\n  " << p.str();
      worst_right = std::max(worst_right, p.rel_error());
    }
    float* g = m.gpt.store().tensor(ChunkKind::GRAD, i).f32();
    const std::vector<float> right(g, g + slots[id].numel);
    for (float factor : {0.0f, 2.0f, -1.0f}) {
      for (size_t e = 0; e < right.size(); ++e) g[e] = factor * right[e];
      for (const auto& p : checker.check_tensor(i)) {
        EXPECT_FALSE(p.failure.empty())
            << "the gradient of " << slots[id].name << " multiplied by " << factor
            << " passes the finite-difference check: " << p.str();
        least_wrong = std::min(least_wrong, p.rel_error());
      }
      std::copy(right.begin(), right.end(), g);
    }
  }
  std::printf(
      "worst relative error of the true gradient %.2e; least of a gradient x0, x2, x-1: "
      "%.2e (tolerance %.2f)\n",
      worst_right, least_wrong, checker.options().rel_tol);
}

TEST(GPT, RejectsSequencesLongerThanMaxSeqLen) {
  GPT gpt(small_config(0.0f), ActivationPolicy::SAVE_ALL);
  try {
    gpt.make_micro_batch(1, 11);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_seq_len"), std::string::npos) << e.what();
  }
}
