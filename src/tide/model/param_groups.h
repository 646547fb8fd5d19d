#pragma once
// Why: ZeRO-3 gathers, and automatic placement moves, the parameters a block part is about to
// read, so the unit the model acquires bounds what must sit gathered on the device at once.
// A whole transformer block is 12 C^2 parameters: at 1T parameters (C = 25600) that is 14.6 GiB
// in bf16, more than DeepSpeed's whole per-GPU estimate leaves beside the model states at 1024
// GPUs. DeepSpeed gathers per module; tide's blocks acquire their parameters per op group:
//
//   transformer block   0: ln_1 + attn.c_attn   1: attn.c_proj   2: ln_2 + mlp.c_fc
//                       3: mlp.c_proj
//   embedding           0: wte, wpe (its B reads no parameter and acquires none)
//   head                0: ln_f + the LM head weight (wte, or lm_head.weight on a later stage)
//   Llama family layer  0: input_layernorm + self_attn.qkv_proj (+ bias)  1: self_attn.o_proj
//                       2: post_attention_layernorm + mlp.gate_up_proj  3: mlp.down_proj
//   Llama embedding     0: wte;   Llama head  0: ln_f.weight + output.weight (untied) or wte
//
// This file is the one description of the groups and of the order each block part acquires
// them. The model builds its blocks from it (gpt.cpp) and its blocks acquire in this order
// (the ZeRO and placement policies check it at every access); the engine turns it into the
// step's access list (ZeRO-3's prefetch, automatic placement's next-use); the estimator replays
// ZeRO's buffers over it (estimate/zero_buffers.h).

#include <span>
#include <vector>

#include "tide/memory/chunk_layout.h"
#include "tide/memory/placement.h"
#include "tide/model/activations.h"

namespace tide {

// One block's parameters, in the groups its ops acquire together.
struct BlockGroups {
  enum class Kind { EMBEDDING, LAYER, HEAD };
  Kind kind = Kind::LAYER;
  std::vector<std::vector<int>> groups;      // tensor ids per group, in forward order
  std::vector<std::vector<int>> grads_done;  // per group: the ids whose gradient its W completes

  // A transformer block: its ops acquire their groups themselves (GroupAccess::use); the
  // embedding's and the head's parts run with their one group acquired around them.
  bool per_op() const { return kind == Kind::LAYER; }

  // All of the block's tensor ids, group after group.
  std::vector<int> ids() const;
};

// The blocks of a layout made by make_layout (model/layout.h), found by tensor name: the
// embedding (wte, wpe) when the layout holds wte, one block per layer, and the head (ln_f and
// the LM head weight) when it holds ln_f. The tied wte's gradient is completed by the
// embedding (the last of its two users in backward order) when both are in the layout; a
// later pipeline stage's lm_head.weight by the head.
std::vector<BlockGroups> block_groups(const ChunkLayout& layout);

// The groups (indices into b.groups) that part `use` of block b acquires, in order.
// Transformer block: F 0 1 2 3; B 3 2 1 0, after 0 1 2 under the FULL policy (its
// recomputation stops before mlp.c_proj: the block output is already consumed); W 3 2 1 0.
// Embedding: 0, none in B. Head: 0.
// (Static storage: every part of every step asks, and a step allocates nothing.)
std::span<const int> part_groups(const BlockGroups& b, Use use, ActivationPolicy policy);

// The groups of all blocks, numbered block after block: what the engine's access list and the
// ZeRO / placement policies index.
struct ParamGroups {
  std::vector<std::vector<int>> ids;  // per group, its tensor ids
  std::vector<int> first;             // per block, the number of its group 0

  explicit ParamGroups(const std::vector<BlockGroups>& blocks);
};

}  // namespace tide
