#pragma once
// KvDecoder: generation with a key/value cache. Why: the training forward runs whole (B,T)
// sequences, so sampling with it recomputes the whole context for every new token (O(T^2) work
// per token; a 5000-token sample took over 11 minutes). The decoder feeds one token at a time,
// keeps every layer's keys and values of the positions seen, and computes only the new
// position: each token costs one position's matmuls plus attention over the cache.
//
// Both families: GPT-2 (learned positions, LayerNorm, GELU MLP, tied head) and the Llama
// family (RMSNorm, RoPE turning the new position's q and k by its position before its k is
// cached, grouped-query attention over the n_kv_head cached heads, SwiGLU, tied or untied
// head, Qwen2's qkv bias).
//
// It reads the model's parameters as they are (no dropout, inference only); they must be
// resident whole (a model built for sampling or evaluation, not a ZeRO-3 shard). The result
// equals the training forward's logits at that position up to float rounding (the matmuls run
// on one row instead of T): DecoderMatchesForward checks 1e-5.

#include <cstdint>
#include <vector>

#include "tide/kernels/ops.h"
#include "tide/model/gpt.h"

namespace tide {

class KvDecoder {
 public:
  explicit KvDecoder(GPT& model);

  // Feeds `token` at the next position (< max_seq_len) and returns the logits (V) for the
  // token after it; valid until the next call.
  const float* push(int32_t token);
  int position() const { return pos_; }
  int capacity() const { return T_; }
  void reset() { pos_ = 0; }

 private:
  Tensor param(const std::string& name) const;
  void push_gpt2(int32_t token);
  void push_llama(int32_t token);
  // Causal attention of this position's queries (qkv_'s q heads) over the cached keys and
  // values of layer l into att_: query head h reads kv head h / (NH / KV).
  void attend(int l);

  GPT& model_;
  OpContext op_;
  int L_, T_, C_, NH_, KV_, V_;
  int64_t kv_width_;  // KV * head size: the cached width of one position (C for GPT-2)
  int pos_ = 0;
  std::vector<float> k_, v_;  // (L, T, KV * head size) each: the cached keys and values
  std::vector<float> x_, ln_, qkv_, att_, tmp_, fc_, gelu_, logits_, stats_, probs_;
  std::vector<float> inv_freq_;  // the Llama family: RoPE's (head size / 2)
};

}  // namespace tide
