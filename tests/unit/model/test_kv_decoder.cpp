// The KV-cache decoder against the training forward: feeding a sequence one token at a time
// gives, at every position, the logits the whole-sequence forward gives there (1e-5 of the
// logits' scale), and a reset starts a new sequence. For the Llama family (RoPE at the cached
// position, grouped-query attention, untied head or Qwen2's qkv bias) also greedily: each
// token the decoder picks is the argmax of the full forward recomputed over the sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "tide/core/rng.h"
#include "tide/model/gpt.h"
#include "tide/model/kv_decoder.h"

using namespace tide;

namespace {

// Logits (T,V) of the training forward (no dropout) for one sequence.
std::vector<float> forward_logits(GPT& model, const std::vector<int32_t>& tokens) {
  const int T = static_cast<int>(tokens.size()), V = model.config().vocab_size;
  auto mb = model.make_micro_batch(1, T);
  mb->training = false;
  mb->keep_logits = true;
  for (int t = 0; t < T; ++t) {
    mb->tokens.i32()[t] = tokens[t];
    mb->targets.i32()[t] = -1;
  }
  model.forward(*mb);
  return std::vector<float>(mb->logits.f32(), mb->logits.f32() + int64_t{T} * V);
}

TEST(KvDecoder, DecoderMatchesForwardAtEveryPosition) {
  GPTConfig c;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_embd = 32;
  c.vocab_size = 97;
  c.max_seq_len = 24;
  GPT model(c, ActivationPolicy::SAVE_ALL, 0, /*with_optimizer=*/false);
  model.init_weights(5);
  const PhiloxStream rng{3, 9};
  std::vector<int32_t> tokens(c.max_seq_len);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(rng.uint(i) % 97);
  const std::vector<float> want = forward_logits(model, tokens);
  float scale = 0;
  for (float v : want) scale = std::max(scale, std::abs(v));
  KvDecoder dec(model);
  for (int round = 0; round < 2; ++round) {  // the second round after a reset
    for (int t = 0; t < c.max_seq_len; ++t) {
      const float* got = dec.push(tokens[t]);
      for (int v = 0; v < c.vocab_size; ++v)
        ASSERT_NEAR(got[v], want[static_cast<size_t>(t) * c.vocab_size + v], 1e-5 * scale)
            << "position " << t << ", token " << v << ", round " << round;
    }
    EXPECT_THROW(dec.push(0), Error);  // full: max_seq_len positions
    dec.reset();
  }
}

// A Llama-family model with every parameter random (norm weights and biases too: a norm or
// bias read from the wrong place shows).
void randomize(GPT& model, uint64_t seed) {
  const ChunkStore& store = model.store();
  const PhiloxStream rng{seed, 77};
  uint64_t i = 0;
  for (int id = 0; id < store.layout().num_tensors(); ++id) {
    const Tensor t = store.tensor(ChunkKind::PARAM, id);
    const bool norm = store.layout().slot(id).name.ends_with("norm.weight") ||
                      store.layout().slot(id).name == "ln_f.weight";
    for (int64_t e = 0; e < t.numel(); ++e)
      t.f32()[e] = (norm ? 1.0f : 0.0f) + 0.2f * rng.normal(i++);
  }
}

GPTConfig llama_config(bool qwen2) {
  GPTConfig c;
  c.family = ModelFamily::llama;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = qwen2 ? 1 : 2;
  c.n_embd = 32;
  c.intermediate_size = 40;
  c.vocab_size = 67;
  c.max_seq_len = 20;
  c.qkv_bias = qwen2;
  c.tie_word_embeddings = qwen2;
  c.rms_norm_eps = qwen2 ? 1e-6 : 1e-5;
  c.rope_theta = qwen2 ? 1e6 : 5e5;
  if (!qwen2) {  // Llama 3's scaling, with a short original context so that it changes angles
    c.rope_scaling = RopeScaling::llama3;
    c.rope_original_max_position_embeddings = 8;
  }
  return c;
}

TEST(KvDecoder, LlamaGreedyDecodingEqualsTheFullForward) {
  for (const bool qwen2 : {false, true}) {
    const GPTConfig c = llama_config(qwen2);
    GPT model(c, ActivationPolicy::SAVE_ALL, 0, /*with_optimizer=*/false);
    randomize(model, qwen2 ? 11 : 12);
    std::vector<int32_t> tokens = {5, 17, 42};  // the prompt
    KvDecoder dec(model);
    std::vector<std::vector<float>> got;  // the decoder's logits at each position
    for (size_t t = 0; t < tokens.size(); ++t) {
      const float* l = dec.push(tokens[t]);
      got.emplace_back(l, l + c.vocab_size);
      // Past the prompt, greedy: the decoder's own argmax is the next token.
      if (t + 1 == tokens.size() && static_cast<int>(tokens.size()) < c.max_seq_len)
        tokens.push_back(static_cast<int32_t>(std::max_element(l, l + c.vocab_size) - l));
    }
    const std::vector<float> want = forward_logits(model, tokens);
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::abs(v));
    std::set<int32_t> distinct;
    for (size_t t = 0; t < got.size(); ++t) {
      const float* w = want.data() + t * c.vocab_size;
      for (int v = 0; v < c.vocab_size; ++v)
        ASSERT_NEAR(got[t][v], w[v], 1e-5 * scale)
            << (qwen2 ? "qwen2" : "llama") << ": position " << t << ", token " << v;
      if (t + 1 < tokens.size() && t >= 2) {  // a generated token: the forward's argmax
        EXPECT_EQ(tokens[t + 1], std::max_element(w, w + c.vocab_size) - w) << "position " << t;
        distinct.insert(tokens[t + 1]);
      }
    }
    EXPECT_EQ(static_cast<int>(tokens.size()), c.max_seq_len);
    EXPECT_GT(distinct.size(), 3u) << "a degenerate continuation proves little";
  }
}

}  // namespace
