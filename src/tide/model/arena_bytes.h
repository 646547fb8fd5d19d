#pragma once
// The bytes of a micro-batch's arenas, as functions of the model's shape alone: what a block
// keeps in MicroBatch::saved from F to B, needs at most in the workspace during one part, and
// leaves in its W stash slot from B to W. The blocks' saved_bytes / workspace_bytes /
// stash_bytes return these, and GPT::make_micro_batch sizes its arenas with
// micro_batch_arenas(), so the memory estimator (`tide estimate`, which builds no model) counts
// the bytes the runtime allocates, not a second formula that could drift from them.
//
// Activations are in the model's compute dtype (ArenaShape::act_bytes: 4 for f32, 2 for bf16
// and fp16); the logits and the statistics (layernorm's mean and rstd, the losses, the
// vocabulary-parallel cross-entropy's maxima and sums) are f32, and tokens and targets i32. Each
// allocation is rounded up to the arena's 64 bytes.

#include <cstddef>
#include <cstdint>

#include "tide/model/activations.h"
#include "tide/model/config.h"

namespace tide {

struct ArenaShape {
  const GPTConfig* config = nullptr;
  ActivationPolicy policy = ActivationPolicy::SAVE_ALL;
  int tp = 1;       // tensor-parallel ranks
  int tp_rank = 0;  // this rank (the head's vocabulary columns; rank 0 holds the most)
  bool sp = false;  // sequence parallelism (tp > 1)
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  // Bytes of one activation element: the compute dtype's (BlockEnv::act).
  size_t act_bytes = 4;
  // Positions of a sequence in this rank's residual stream.
  int64_t seq_local(int64_t T) const { return sp ? T / tp : T; }
};

size_t transformer_saved_bytes(const ArenaShape& s, int B, int T);
size_t transformer_workspace_bytes(const ArenaShape& s, int B, int T);
size_t transformer_stash_bytes(const ArenaShape& s, int B, int T);
size_t embedding_saved_bytes(const ArenaShape& s, int B, int T);
size_t embedding_workspace_bytes(const ArenaShape& s, int B, int T);
size_t embedding_stash_bytes(const ArenaShape& s, int B, int T);
// The head's vocabulary columns on tp rank s.tp_rank.
int64_t head_vocab_cols(const ArenaShape& s);
size_t head_saved_bytes(const ArenaShape& s, int B, int T);
size_t head_workspace_bytes(const ArenaShape& s, int B, int T);
size_t head_stash_bytes(const ArenaShape& s, int B, int T);

// The Llama family's blocks (llama_blocks.h).
size_t llama_layer_saved_bytes(const ArenaShape& s, int B, int T);
size_t llama_layer_workspace_bytes(const ArenaShape& s, int B, int T);
size_t llama_layer_stash_bytes(const ArenaShape& s, int B, int T);
size_t llama_embedding_saved_bytes(const ArenaShape& s, int B, int T);
size_t llama_embedding_workspace_bytes(const ArenaShape& s, int B, int T);
size_t llama_embedding_stash_bytes(const ArenaShape& s, int B, int T);
size_t llama_head_saved_bytes(const ArenaShape& s, int B, int T);
size_t llama_head_workspace_bytes(const ArenaShape& s, int B, int T);
size_t llama_head_stash_bytes(const ArenaShape& s, int B, int T);

// One micro-batch of a model holding transformer layers [first_layer, end_layer) and the
// embedding and/or the head: its `saved` arena (tokens, targets, the residual boundaries and
// every block's saved bytes; for an evaluation micro-batch the blocks keep nothing there), its
// `workspace` (the largest part's), one W stash slot (the largest block's stash) and the host
// checkpoint pool (cpu_checkpointing).
struct MicroBatchArenas {
  size_t saved = 0;
  size_t workspace = 0;
  size_t stash_slot = 0;
  size_t host_checkpoints = 0;
};
MicroBatchArenas micro_batch_arenas(const ArenaShape& s, int first_layer, int end_layer,
                                    bool embedding, bool head, int B, int T, bool training = true);

}  // namespace tide
