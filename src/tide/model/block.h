#pragma once
// A model is a list of blocks: embedding, n_layer transformer blocks, head (+ loss).
// Each block runs in three parts, so that a pipeline schedule can place them freely:
//
//   forward(mb)          input activation -> output activation; saves what backward needs
//   backward_input(mb)   "B": gradient w.r.t. the block input (needed right away upstream)
//   backward_weight(mb)  "W": gradients w.r.t. the block's parameters (may be deferred)
//
// All per-micro-batch state lives in the MicroBatch, never in the block, so several
// micro-batches can be in flight at once.

#include <cstdint>
#include <vector>

#include "tide/core/arena.h"
#include "tide/kernels/ops.h"
#include "tide/memory/chunk_store.h"
#include "tide/model/activations.h"
#include "tide/model/config.h"

namespace tide {

struct MicroBatch {
  int B = 0, T = 0;
  Tensor tokens;         // (B,T) int32 inputs
  Tensor targets;        // (B,T) int32 next tokens; entries < 0 are ignored by the loss
  bool training = true;  // dropout on, activations saved for backward
  uint64_t seed = 0;     // run seed (dropout masks)
  uint64_t step = 0;     // optimizer step (dropout masks)
  int index = 0;         // micro-batch index within the step (dropout masks)
  float dloss = 1.0f;    // d(objective)/d(mean loss of this micro-batch): 1/grad_accum * scale

  Arena saved;      // activations kept from forward to backward
  Arena workspace;  // temporaries of one block (forward scratch, recomputation, B->W grads)
  std::vector<Tensor> residual;  // L+1 block boundaries, each (B,T,C); residual[0] = embedding
  Tensor dresidual;              // (B,T,C) gradient flowing down the residual stream
  std::vector<std::vector<Tensor>> block_saved;  // per block, the block's own saved tensors
  size_t saved_mark = 0;  // mb.saved position after the buffers above (per-forward state follows)
  size_t workspace_mark = 0;  // workspace position at the start of the current block
  float loss = 0.0f;          // mean loss over the micro-batch (after forward)
  bool keep_logits = false;   // evaluation: keep the head's logits in `logits` (sampling)
  Tensor logits;              // (B,T,V), set by the head when training or keep_logits
};

// Everything a block needs besides the micro-batch: model shape, op context, chunk store.
struct BlockEnv {
  const GPTConfig* config = nullptr;
  ActivationPolicy policy = ActivationPolicy::SAVE_ALL;
  OpContext op;
  ChunkStore* store = nullptr;

  Tensor param(int id) const { return store->tensor(ChunkKind::PARAM, id); }
  Tensor grad(int id) const { return store->tensor(ChunkKind::GRAD, id); }
  DropoutSpec dropout(const MicroBatch& mb, int layer, int site) const;
};

class Block {
 public:
  virtual ~Block() = default;
  virtual void forward(MicroBatch& mb) = 0;
  virtual void backward_input(MicroBatch& mb) = 0;
  virtual void backward_weight(MicroBatch& mb) = 0;
  // Chunk-store ids of the parameters this block reads (acquired around each part).
  const std::vector<int>& param_ids() const { return param_ids_; }
  // Bytes this block keeps in mb.saved and needs at most in mb.workspace, for (B,T).
  virtual size_t saved_bytes(int B, int T) const = 0;
  virtual size_t workspace_bytes(int B, int T) const = 0;

 protected:
  std::vector<int> param_ids_;
};

// Bytes of `n` f32 values as the arena rounds them (used by the *_bytes functions).
inline size_t f32_bytes(int64_t n) {
  return Arena::aligned(static_cast<size_t>(n) * 4);
}

}  // namespace tide
