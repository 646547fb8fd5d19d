// The Llama-family model (model/llama_blocks.h) against transformers' LlamaForCausalLM,
// Qwen2ForCausalLM and MistralForCausalLM (tests/fixtures/llama_tiny.json, written by
// tools/gen_llama_fixture.py), the presets' published parameter counts, the activation
// policies against each other and the arenas against what the blocks allocate.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grad_check.h"
#include "tide/core/error.h"
#include "tide/core/rng.h"
#include "tide/memory/chunk_store.h"
#include "tide/model/gpt.h"

using namespace tide;

namespace {

nlohmann::json llama_fixture() {
  std::ifstream f(std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/llama_tiny.json");
  return nlohmann::json::parse(f);
}

GPTConfig llama_fixture_config(const nlohmann::json& c) {
  GPTConfig g;
  g.family = ModelFamily::llama;
  g.n_layer = c["n_layer"];
  g.n_head = c["n_head"];
  g.n_kv_head = c["n_kv_head"];
  g.n_embd = c["n_embd"];
  g.intermediate_size = c["intermediate_size"];
  g.vocab_size = c["vocab_size"];
  g.max_seq_len = c["max_seq_len"];
  g.rms_norm_eps = c["rms_norm_eps"];
  g.rope_theta = c["rope_theta"];
  g.tie_word_embeddings = c["tie_word_embeddings"];
  g.qkv_bias = c["qkv_bias"];
  if (c["rope_scaling"] == "llama3") {
    g.rope_scaling = RopeScaling::llama3;
    g.rope_factor = c["rope_factor"];
    g.rope_low_freq_factor = c["rope_low_freq_factor"];
    g.rope_high_freq_factor = c["rope_high_freq_factor"];
    g.rope_original_max_position_embeddings = c["rope_original_max_position_embeddings"];
  }
  return g;
}

// ||tide - ref|| / ||ref|| in double.
double llama_rel_error(const float* a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

// A small Llama with everything switched on: GQA (4 query heads over 2), a qkv bias, an
// untied head, llama3 rope scaling.
GPTConfig small_llama() {
  GPTConfig c;
  c.family = ModelFamily::llama;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 16;
  c.intermediate_size = 24;
  c.vocab_size = 37;
  c.max_seq_len = 10;
  c.qkv_bias = true;
  c.tie_word_embeddings = false;
  c.rope_theta = 100;
  c.rope_scaling = RopeScaling::llama3;
  c.rope_original_max_position_embeddings = 16;
  return c;
}

void llama_fill_batch(MicroBatch& mb, int V, uint64_t seed) {
  PhiloxStream rng{seed, 7};
  for (int64_t i = 0; i < mb.tokens.numel(); ++i) {
    mb.tokens.i32()[i] = static_cast<int32_t>(rng.uint(2 * i) % V);
    mb.targets.i32()[i] = static_cast<int32_t>(rng.uint(2 * i + 1) % V);
  }
}

// Weights large enough that attention, RoPE and the norms matter (HF's init leaves attention
// nearly uniform).
void llama_randomize(GPT& gpt, uint64_t seed) {
  const auto& slots = gpt.store().layout().slots();
  for (size_t id = 0; id < slots.size(); ++id) {
    const bool norm =
        slots[id].name.find("norm") != std::string::npos || slots[id].name == "ln_f.weight";
    const PhiloxStream rng{seed, id};
    float* w = gpt.store().tensor(ChunkKind::PARAM, static_cast<int>(id)).f32();
    for (int64_t i = 0; i < slots[id].numel; ++i)
      w[i] = static_cast<float>((norm ? 1.0 : 0.0) + 0.4 * rng.normal(static_cast<uint64_t>(i)));
  }
}

std::vector<float> llama_all_grads(GPT& gpt) {
  std::vector<float> g;
  for (size_t id = 0; id < gpt.store().layout().slots().size(); ++id) {
    const Tensor t = gpt.store().tensor(ChunkKind::GRAD, static_cast<int>(id));
    g.insert(g.end(), t.f32(), t.f32() + t.numel());
  }
  return g;
}

}  // namespace

// Published parameter counts (the models' safetensors totals on the Hugging Face hub), and the
// layout holds exactly them.
TEST(LlamaPresets, ParameterCountsMatchThePublishedOnes) {
  const std::map<std::string, int64_t> published = {
      {"llama3.2-1b", 1235814400}, {"llama3.2-3b", 3212749824}, {"llama3.1-8b", 8030261248},
      {"qwen2.5-0.5b", 494032768}, {"qwen2.5-7b", 7615616512},  {"mistral-7b", 7241732096}};
  for (const auto& [name, count] : published) {
    const GPTConfig c = GPTConfig::preset(name);
    EXPECT_TRUE(c.is_llama()) << name;
    EXPECT_EQ(c.num_parameters(), count) << name;
    int64_t in_layout = 0;
    const ChunkLayout layout = make_layout(c);  // (a temporary's slots() would dangle)
    for (const TensorSlot& s : layout.slots()) in_layout += s.numel;
    EXPECT_EQ(in_layout, count) << name;
  }
}

// The fixture's three models: tide (f32) against transformers in float64. The bound is the
// fixture's tolerance (1e-5 relative per tensor), which the generator set 5x above torch's own
// float32 run's worst error against the same float64 reference (2.1e-6); breaking RoPE's pair
// order or GQA's head mapping moves some gradient by more than 1 (relative).
TEST(LlamaReference, LossAndGradientsMatchTransformers) {
  const nlohmann::json fx = llama_fixture();
  const double tol = fx["tolerance"];
  for (const auto& m : fx["models"]) {
    const std::string name = m["name"];
    const GPTConfig cfg = llama_fixture_config(m["config"]);
    const int B = m["config"]["B"], T = m["config"]["T"];
    GPT gpt(cfg, ActivationPolicy::SAVE_ALL);
    std::map<std::string, std::vector<float>> params;
    for (const auto& p : m["params"]) params[p["name"]] = p["data"].get<std::vector<float>>();
    const auto& slots = gpt.store().layout().slots();
    ASSERT_EQ(slots.size(), params.size()) << name;
    for (size_t id = 0; id < slots.size(); ++id) {
      const std::vector<float>& v = params.at(slots[id].name);
      ASSERT_EQ(static_cast<int64_t>(v.size()), slots[id].numel) << name << " " << slots[id].name;
      std::memcpy(gpt.store().tensor(ChunkKind::PARAM, static_cast<int>(id)).data, v.data(),
                  v.size() * 4);
    }
    auto mb = gpt.make_micro_batch(B, T);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        mb->tokens.i32()[b * T + t] = m["tokens"][b][t];
        mb->targets.i32()[b * T + t] = m["tokens"][b][t + 1];
      }
    gpt.store().zero(ChunkKind::GRAD, gpt.op());
    const double loss = gpt.forward(*mb);
    gpt.backward(*mb);
    const double ref = m["loss"], torch32 = m["loss_f32_torch"];
    EXPECT_NEAR(loss, ref, 1e-6 * ref) << name;
    std::printf("%s: loss %.9f, transformers f64 %.9f (tide rel %.1e, torch f32 rel %.1e)\n",
                name.c_str(), loss, ref, std::abs(loss - ref) / ref, std::abs(torch32 - ref) / ref);
    double worst = 0, worst_torch = 0;
    for (const auto& g : m["grads"]) {
      const std::string tensor = g["name"];
      const int id = gpt.store().layout().find(tensor);
      const Tensor grad = gpt.store().tensor(ChunkKind::GRAD, id);
      const std::vector<double> want = g["data"].get<std::vector<double>>();
      ASSERT_EQ(grad.numel(), static_cast<int64_t>(want.size())) << name << " " << tensor;
      const double err = llama_rel_error(grad.f32(), want);
      EXPECT_LT(err, tol) << name << " " << tensor;
      worst = std::max(worst, err);
      worst_torch = std::max(worst_torch, m["torch_f32_rel_error"][tensor].get<double>());
    }
    std::printf("%s: worst gradient rel error vs transformers f64: tide %.2e, torch f32 %.2e\n",
                name.c_str(), worst, worst_torch);
  }
}

TEST(LlamaModel, ActivationPoliciesGiveBitwiseIdenticalGradients) {
  const GPTConfig cfg = small_llama();
  std::vector<std::vector<float>> grads;
  std::vector<float> losses;
  for (ActivationPolicy p :
       {ActivationPolicy::SAVE_ALL, ActivationPolicy::SELECTIVE, ActivationPolicy::FULL}) {
    GPT gpt(cfg, p);
    gpt.init_weights(5);
    llama_randomize(gpt, 9);
    auto mb = gpt.make_micro_batch(3, 7);
    llama_fill_batch(*mb, cfg.vocab_size, 11);
    gpt.store().zero(ChunkKind::GRAD, gpt.op());
    losses.push_back(gpt.forward(*mb));
    gpt.backward(*mb);
    grads.push_back(llama_all_grads(gpt));
  }
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(losses[i], losses[0]);
    ASSERT_EQ(grads[i].size(), grads[0].size());
    EXPECT_EQ(std::memcmp(grads[i].data(), grads[0].data(), grads[0].size() * 4), 0)
        << "policy " << i << " differs from save-all";
  }
}

// make_micro_batch sizes the arenas from arena_bytes.h (what tide estimate counts): the saved
// arena must be used to the byte by a training step, and the workspace and stash bound what a
// step uses. (An arena too small throws.)
TEST(LlamaModel, ArenaSizesAreWhatTheBlocksAllocate) {
  for (bool tied : {true, false})
    for (ActivationPolicy p :
         {ActivationPolicy::SAVE_ALL, ActivationPolicy::SELECTIVE, ActivationPolicy::FULL}) {
      GPTConfig cfg = small_llama();
      cfg.tie_word_embeddings = tied;
      GPT gpt(cfg, p);
      gpt.init_weights(1);
      const int B = 2, T = 9;
      auto mb = gpt.make_micro_batch(B, T);
      llama_fill_batch(*mb, cfg.vocab_size, 3);
      gpt.forward(*mb);
      const std::string what = std::string(activation_policy_name(p)) + (tied ? " tied" : "");
      EXPECT_EQ(mb->saved.used(), mb->saved.capacity()) << what;
      gpt.backward(*mb);
      EXPECT_LE(mb->workspace.peak(), mb->workspace.capacity()) << what;
      // The largest part's workspace: evaluation's (everything temporary) for a layer.
      const ArenaShape shape{.config = &gpt.config(), .policy = p};
      EXPECT_EQ(mb->stash->slot_bytes(), llama_layer_stash_bytes(shape, B, T)) << what;
      size_t stash_peak = 0;
      for (int s = 0; s < mb->stash->slots(); ++s)
        stash_peak = std::max(stash_peak, mb->stash->slot(s).peak());
      EXPECT_EQ(stash_peak, mb->stash->slot_bytes()) << what;
      auto eval = gpt.make_micro_batch(B, T, nullptr, /*training=*/false);
      llama_fill_batch(*eval, cfg.vocab_size, 3);
      eval->training = false;
      gpt.forward(*eval);
      EXPECT_EQ(eval->workspace.peak(), eval->workspace.capacity()) << what;
    }
}

// model.dropout is the family's attention dropout (transformers' attention_dropout), its only
// one: the gradient with its masks matches finite differences of the loss (masks fixed by the
// step's coordinates, under full recompute, which draws them again), another step draws other
// masks, and evaluation has none (the dropout-free model's loss).
TEST(LlamaModel, AttentionDropoutGradientMatchesFiniteDifferences) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  GPTConfig cfg = small_llama();
  cfg.dropout = 0.1f;
  GPT gpt(cfg, ActivationPolicy::FULL);
  gpt.init_weights(5);
  llama_randomize(gpt, 9);
  auto mb = gpt.make_micro_batch(3, 7);
  llama_fill_batch(*mb, cfg.vocab_size, 11);
  mb->seed = 99;
  mb->step = 2;
  gpt.store().zero(ChunkKind::GRAD, gpt.op());
  const float loss = gpt.forward(*mb);
  gpt.backward(*mb);
  test::GradChecker checker(gpt, [&] { return double(gpt.forward(*mb)); });
  ASSERT_TRUE(checker.deterministic());
  for (const auto& p : checker.check_all()) EXPECT_TRUE(p.failure.empty()) << p.str();
  mb->step = 3;
  EXPECT_NE(gpt.forward(*mb), loss) << "another step, the same masks";
  GPTConfig plain = cfg;
  plain.dropout = 0.0f;
  GPT without(plain, ActivationPolicy::FULL);
  copy_chunks(gpt.op(), gpt.store(), without.store());
  auto eval = gpt.make_micro_batch(3, 7, nullptr, /*training=*/false);
  auto eval_plain = without.make_micro_batch(3, 7, nullptr, /*training=*/false);
  for (auto* m : {eval.get(), eval_plain.get()}) {
    llama_fill_batch(*m, cfg.vocab_size, 11);
    m->training = false;
  }
  EXPECT_EQ(gpt.forward(*eval), without.forward(*eval_plain)) << "dropout in evaluation";
  EXPECT_NE(loss, without.forward(*eval_plain)) << "no dropout in training";
  omp_set_num_threads(threads);
}

TEST(LlamaModel, RefusesWhatItCannotRun) {
  GPTConfig c = small_llama();
  c.n_kv_head = 3;  // does not divide 4
  EXPECT_THROW(c.validate(), Error);
  c = small_llama();
  // 2 key/value heads over 4 ranks: each replicated over 2 (Megatron's n_kv_head < t).
  EXPECT_EQ(make_layout(c, RankCoords{.tp = 4}).num_tensors(), make_layout(c).num_tensors());
  c.n_head = 6;  // over 3 ranks: 2 kv heads neither divide over them nor divide them
  c.n_embd = 24;
  try {
    make_layout(c, RankCoords{.tp = 3});
    ADD_FAILURE() << "2 key/value heads over 3 tensor-parallel ranks accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_kv_head 2 does not divide over 3 "
                                         "tensor-parallel ranks and is not a divisor of 3"),
              std::string::npos)
        << e.what();
  }
}
