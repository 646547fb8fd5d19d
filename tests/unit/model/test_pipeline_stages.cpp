// A GPT split into pipeline stages computes what the whole model computes. The stage models
// run one after another in this process, the (B,T,C) activation passed forward and its
// gradient passed back by memcpy (what the pipeline executor sends between ranks). The loss and
// every gradient must be bitwise the whole model's, with dropout, for every activation policy.
//
// The tied embedding is the one tensor two stages write: the whole model adds the head's
// contribution into wte's gradient first and the embedding's scatter on top of it (backward
// order). Starting stage 0's wte gradient from the last stage's lm_head gradient reproduces that
// order exactly, so with one micro-batch the tied gradient is bitwise too. With several
// micro-batches the whole model interleaves head(m+1) after embedding(m), which two separate
// accumulators cannot reproduce; there the executor's sum (wte + lm_head, after the step's
// backward) is checked to 1e-6 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "test_batches.h"
#include "tide/model/gpt.h"

using namespace tide;

namespace {

GPTConfig config() {
  GPTConfig c;
  c.n_layer = 12;  // divides over 2, 3 and 4 stages
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 41;
  c.max_seq_len = 8;
  c.dropout = 0.1f;
  return c;
}

constexpr int kB = 2, kT = 8;
constexpr uint64_t kSeed = 17;

using Named = std::map<std::string, std::vector<float>>;

Named tensors(GPT& gpt, ChunkKind kind) {
  Named out;
  const ChunkLayout& lay = gpt.store().layout();
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const Tensor t = gpt.store().tensor(kind, id);
    out[lay.slot(id).name].assign(t.f32(), t.f32() + t.numel());
  }
  return out;
}

void copy(Tensor dst, const Tensor& src) {
  ASSERT_EQ(dst.nbytes(), src.nbytes());
  std::memcpy(dst.data, src.data, src.nbytes());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Result {
  std::vector<float> losses;  // per micro-batch
  Named grads;                // by name; the tied wte holds the whole model's combined gradient
};

Result whole(ActivationPolicy policy, int M) {
  GPT gpt(config(), policy, 0, /*with_optimizer=*/false);
  gpt.init_weights(kSeed);
  auto mb = gpt.make_micro_batch(kB, kT);
  Result r;
  for (int m = 0; m < M; ++m) {
    test::fill_test_batch(*mb, m);
    r.losses.push_back(gpt.forward(*mb));
    gpt.backward(*mb);
  }
  r.grads = tensors(gpt, ChunkKind::GRAD);
  return r;
}

// `ordered_tie`: before stage 0's backward, start its wte gradient from the last stage's
// lm_head gradient (the whole model's order; one micro-batch only). Otherwise wte's gradient is
// the sum of the two after the step, as the executor does.
Result staged(ActivationPolicy policy, int pp, int M, bool ordered_tie) {
  std::vector<std::unique_ptr<GPT>> stages;
  std::vector<std::unique_ptr<MicroBatch>> mbs;
  for (int s = 0; s < pp; ++s) {
    ModelOptions o;
    o.store.with_optimizer = false;
    o.pp = pp;
    o.stage = s;
    stages.push_back(std::make_unique<GPT>(config(), policy, o));
    stages[s]->init_weights(kSeed);
    mbs.push_back(stages[s]->make_micro_batch(kB, kT));
  }
  Result r;
  for (int m = 0; m < M; ++m) {
    for (int s = 0; s < pp; ++s) {
      test::fill_test_batch(*mbs[s], m);
      if (s > 0)
        copy(stages[s]->input_activation(*mbs[s]), stages[s - 1]->output_activation(*mbs[s - 1]));
      stages[s]->forward(*mbs[s]);
    }
    r.losses.push_back(mbs[pp - 1]->loss);
    for (int s = pp - 1; s >= 0; --s) {
      if (s < pp - 1)
        copy(stages[s]->residual_grad(*mbs[s]), stages[s + 1]->residual_grad(*mbs[s + 1]));
      if (s == 0 && ordered_tie) {
        const ChunkLayout& last = stages[pp - 1]->store().layout();
        copy(stages[0]->store().tensor(ChunkKind::GRAD, stages[0]->store().layout().find("wte")),
             stages[pp - 1]->store().tensor(ChunkKind::GRAD, last.find("lm_head.weight")));
      }
      stages[s]->backward(*mbs[s]);
    }
  }
  for (int s = 0; s < pp; ++s)
    for (auto& [name, g] : tensors(*stages[s], ChunkKind::GRAD)) r.grads[name] = g;
  std::vector<float> head = r.grads.at("lm_head.weight");
  r.grads.erase("lm_head.weight");
  if (!ordered_tie)
    for (size_t i = 0; i < head.size(); ++i) r.grads["wte"][i] += head[i];
  return r;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

constexpr ActivationPolicy kPolicies[] = {ActivationPolicy::SAVE_ALL, ActivationPolicy::SELECTIVE,
                                          ActivationPolicy::FULL};

}  // namespace

TEST(PipelineStages, EachStageHoldsItsBlocksAndParameters) {
  const GPTConfig c = config();
  for (int pp : {2, 3, 4}) {
    int layers = 0;
    for (int s = 0; s < pp; ++s) {
      ModelOptions o;
      o.pp = pp;
      o.stage = s;
      GPT g(c, ActivationPolicy::SAVE_ALL, o);
      const int per = c.n_layer / pp;
      EXPECT_EQ(g.first_layer(), s * per);
      EXPECT_EQ(g.end_layer(), (s + 1) * per);
      EXPECT_EQ(g.num_blocks(), per + (s == 0) + (s == pp - 1));
      const ChunkLayout& lay = g.store().layout();
      EXPECT_EQ(lay.num_tensors(), 12 * per + 2 * (s == 0) + 3 * (s == pp - 1));
      if (s == pp - 1) {  // the head reads the stage's own copy of the tied embedding
        const std::vector<int>& head = g.block(g.num_blocks() - 1).param_ids();
        EXPECT_EQ(head.back(), lay.find("lm_head.weight"));
      }
      layers += g.end_layer() - g.first_layer();
    }
    EXPECT_EQ(layers, c.n_layer);
  }
}

TEST(PipelineStages, InitialisationEqualsTheWholeModel) {
  GPT ref(config(), ActivationPolicy::SAVE_ALL, 0, false);
  ref.init_weights(kSeed);
  const Named want = tensors(ref, ChunkKind::PARAM);
  for (int pp : {2, 3, 4}) {
    for (int s = 0; s < pp; ++s) {
      ModelOptions o;
      o.store.with_optimizer = false;
      o.pp = pp;
      o.stage = s;
      GPT g(config(), ActivationPolicy::SAVE_ALL, o);
      g.init_weights(kSeed);
      for (const auto& [name, v] : tensors(g, ChunkKind::PARAM))
        EXPECT_TRUE(same_bits(v, want.at(name == "lm_head.weight" ? "wte" : name)))
            << "pp " << pp << " stage " << s << ": " << name;
    }
  }
}

TEST(PipelineStages, StagesInSequenceGiveTheWholeModelsLossAndGradientsBitwise) {
  for (ActivationPolicy policy : kPolicies) {
    const Result ref = whole(policy, 1);
    for (int pp : {2, 3, 4}) {
      const Result got = staged(policy, pp, 1, /*ordered_tie=*/true);
      const std::string where = fmt::format("{}, pp {}", activation_policy_name(policy), pp);
      EXPECT_TRUE(same_bits(got.losses, ref.losses))
          << where << ": loss " << got.losses[0] << " vs " << ref.losses[0];
      ASSERT_EQ(got.grads.size(), ref.grads.size()) << where;
      for (const auto& [name, g] : ref.grads)
        EXPECT_TRUE(same_bits(got.grads.at(name), g)) << where << ": gradient of " << name;
    }
  }
}

TEST(PipelineStages, SummedTiedGradientOverMicroBatchesIsClose) {
  // Two micro-batches accumulated; wte = stage 0's wte gradient + the last stage's lm_head
  // gradient, added after backward (what the executor does). Every other gradient is bitwise.
  for (ActivationPolicy policy : kPolicies) {
    const Result ref = whole(policy, 2);
    for (int pp : {2, 4}) {
      const Result got = staged(policy, pp, 2, /*ordered_tie=*/false);
      const std::string where = fmt::format("{}, pp {}", activation_policy_name(policy), pp);
      EXPECT_TRUE(same_bits(got.losses, ref.losses)) << where;
      for (const auto& [name, g] : ref.grads) {
        if (name == "wte")
          EXPECT_LT(rel_diff(got.grads.at(name), g), 1e-6) << where;
        else
          EXPECT_TRUE(same_bits(got.grads.at(name), g)) << where << ": gradient of " << name;
      }
    }
  }
}

TEST(PipelineStages, StagesThatDoNotDivideAreClearErrors) {
  ModelOptions o;
  o.pp = 5;  // 12 layers do not divide over 5 stages
  try {
    GPT g(config(), ActivationPolicy::SAVE_ALL, o);
    FAIL() << "12 layers over 5 stages were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline stages"), std::string::npos) << e.what();
  }
  o.pp = 2;
  o.stage = 2;
  EXPECT_THROW(GPT(config(), ActivationPolicy::SAVE_ALL, o), Error);
}
