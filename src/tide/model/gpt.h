#pragma once
// GPT-2 as a list of blocks over a chunk store.
//
//   blocks[0]          EmbeddingBlock     tokens -> residual[0]
//   blocks[1..L]       TransformerBlock   residual[l-1] -> residual[l]
//   blocks[L+1]        HeadBlock          residual[L] -> loss
//
// Parameters are declared in forward-use order (this order is the chunk layout):
//   wte (V,C), wpe (maxT,C),
//   per layer: ln_1.{weight,bias} (C), attn.c_attn.{weight (3C,C), bias (3C)},
//              attn.c_proj.{weight (C,C), bias (C)}, ln_2.{weight,bias} (C),
//              mlp.c_fc.{weight (4C,C), bias (4C)}, mlp.c_proj.{weight (C,4C), bias (C)},
//   ln_f.{weight,bias} (C).
// The LM head is tied to wte. Names follow Hugging Face's GPT-2 ("h.3.attn.c_attn.weight"),
// with linear weights stored (out, in) as in PyTorch's nn.Linear.

#include <memory>
#include <vector>

#include "tide/model/blocks.h"

namespace tide {

class GPT {
 public:
  // Builds the layout and allocates the chunk store. `chunk_elems` = 0 picks the largest
  // tensor's size (the smallest legal chunk). `group_size` pads the chunk count for DP.
  GPT(const GPTConfig& config, ActivationPolicy policy, int64_t chunk_elems = 0,
      bool with_optimizer = true, int group_size = 1);

  // The chunk layout of a model shape (also used by tools that only need sizes).
  static ChunkLayout make_layout(const GPTConfig& config);

  const GPTConfig& config() const { return config_; }
  ActivationPolicy policy() const { return env_.policy; }
  ChunkStore& store() { return *store_; }
  const ChunkStore& store() const { return *store_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  Block& block(int i) { return *blocks_[i]; }

  // GPT-2 initialisation from `seed`: weights N(0, 0.02), the two residual projections
  // (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2L)), biases 0, layernorm weights 1.
  void init_weights(uint64_t seed);

  // A micro-batch of shape (B,T) with arenas sized for this model and policy.
  // Throws a tide::Error when T exceeds max_seq_len.
  std::unique_ptr<MicroBatch> make_micro_batch(int B, int T) const;

  // Forward through every block; returns the mean loss (also in mb.loss). Before calling,
  // fill mb.tokens / mb.targets and set mb.training, mb.step, mb.index, mb.dloss.
  float forward(MicroBatch& mb);
  // Backward through every block (B then W per block, in reverse order), accumulating into the
  // GRAD chunks. When `last_micro_batch`, marks each parameter's gradient complete as soon as
  // its last contribution is in (the data-parallel hook of the chunk store).
  void backward(MicroBatch& mb, bool last_micro_batch = true);

  // Per-block forward/backward parts, for pipeline executors and tests.
  void forward_block(MicroBatch& mb, int i);
  void backward_input_block(MicroBatch& mb, int i);
  void backward_weight_block(MicroBatch& mb, int i, bool last_micro_batch);

 private:
  void set_states(int block, TensorState s);

  GPTConfig config_;
  BlockEnv env_;
  std::unique_ptr<ChunkStore> store_;
  std::vector<std::unique_ptr<Block>> blocks_;
  // For each block, the parameters whose gradient is complete once that block's W is done
  // (wte: only after the embedding, the last of its two users in backward order).
  std::vector<std::vector<int>> grads_done_after_;
};

}  // namespace tide
