// The GPT model against an independent reference (JAX fixtures), finite differences of the
// whole model, and the activation policies against each other.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "fixture.h"
#include "tide/model/gpt.h"

using namespace tide;

namespace {

void load_params(GPT& gpt, const std::map<std::string, std::vector<float>>& params) {
  const ChunkLayout& lay = gpt.store().layout();
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const auto& v = params.at(lay.slot(id).name);
    ASSERT_EQ(static_cast<int64_t>(v.size()), lay.slot(id).numel) << lay.slot(id).name;
    std::memcpy(gpt.store().tensor(ChunkKind::PARAM, id).data, v.data(), v.size() * 4);
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

std::vector<float> all_grads(GPT& gpt) {
  const ChunkLayout& lay = gpt.store().layout();
  std::vector<float> g;
  for (int c = 0; c < lay.num_chunks(); ++c) {
    Tensor t = gpt.store().chunk(ChunkKind::GRAD, c);
    g.insert(g.end(), t.f32(), t.f32() + t.numel());
  }
  return g;
}

}  // namespace

TEST(GPT, LossAndGradientsMatchJaxReference) {
  test::Fixture fx;
  GPT gpt(fx.config, ActivationPolicy::SAVE_ALL);
  load_params(gpt, fx.tensors("params"));
  auto mb = gpt.make_micro_batch(fx.B, fx.T);
  fx.batch(0, mb->tokens.i32(), mb->targets.i32());
  const float loss = gpt.forward(*mb);
  EXPECT_NEAR(loss, fx.j["loss0"].get<double>(), 1e-4 * std::abs(fx.j["loss0"].get<double>()));
  gpt.store().zero(ChunkKind::GRAD);
  gpt.backward(*mb);
  const auto ref = fx.tensors("grads0");
  const ChunkLayout& lay = gpt.store().layout();
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const std::string& name = lay.slot(id).name;
    const double err = test::rel_error(gpt.store().tensor(ChunkKind::GRAD, id).f32(), ref.at(name));
    EXPECT_LE(err, 1e-4) << name;
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

TEST(GPT, WholeModelGradientMatchesFiniteDifferences) {
  const GPTConfig cfg = small_config(0.1f);  // the masks are fixed by (seed, step): FD works
  GPT gpt(cfg, ActivationPolicy::SELECTIVE);
  gpt.init_weights(3);
  auto mb = gpt.make_micro_batch(2, 6);
  fill_batch(*mb, cfg.vocab_size, 5);
  gpt.forward(*mb);
  gpt.backward(*mb);
  const ChunkLayout& lay = gpt.store().layout();
  // A few entries of every tensor, central differences on the f32 model.
  for (int id = 0; id < lay.num_tensors(); ++id) {
    float* w = gpt.store().tensor(ChunkKind::PARAM, id).f32();
    const float* g = gpt.store().tensor(ChunkKind::GRAD, id).f32();
    for (int64_t i : {int64_t{0}, lay.slot(id).numel / 2, lay.slot(id).numel - 1}) {
      const float h = 1e-2f, orig = w[i];
      w[i] = orig + h;
      const double lp = gpt.forward(*mb);
      w[i] = orig - h;
      const double lm = gpt.forward(*mb);
      w[i] = orig;
      const double fd = (lp - lm) / (2.0 * h);
      EXPECT_NEAR(g[i], fd, 2e-3 + 2e-2 * std::abs(fd)) << lay.slot(id).name << "[" << i << "]";
    }
  }
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
