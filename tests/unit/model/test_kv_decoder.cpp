// The KV-cache decoder against the training forward: feeding a sequence one token at a time
// gives, at every position, the logits the whole-sequence forward gives there (1e-5 of the
// logits' scale), and a reset starts a new sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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

}  // namespace
