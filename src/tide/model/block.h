#pragma once
// A model is a list of blocks: embedding, n_layer transformer blocks, head (+ loss).
// Each block runs in three parts, so that a pipeline schedule can place them freely:
//
//   forward(mb)          input activation -> output activation; saves what backward needs
//   backward_input(mb)   "B": gradient w.r.t. the block input (needed right away upstream);
//                        leaves what W needs in the (micro-batch, block) stash
//   backward_weight(mb)  "W": gradients w.r.t. the block's parameters, from the stash (may be
//                        deferred past other B and W parts, of this and other micro-batches)
//
// All per-micro-batch state lives in the MicroBatch, never in the block, so several
// micro-batches can be in flight at once.

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/core/arena.h"
#include "tide/kernels/mover.h"
#include "tide/kernels/ops.h"
#include "tide/memory/chunk_store.h"
#include "tide/model/activations.h"
#include "tide/model/arena_bytes.h"
#include "tide/model/config.h"
#include "tide/model/stash.h"

namespace tide {

class GroupAccess;

struct MicroBatch {
  int B = 0, T = 0;
  Tensor tokens;   // (B,T) int32 inputs, on the model's device
  Tensor targets;  // (B,T) int32 next tokens; entries < 0 are ignored by the loss
  // Their host copies, which the caller fills (GPT::host_batch) and the head counts targets in,
  // and the head's per-position losses (B,T) f32 read back. On the CPU host_tokens and
  // host_targets are tokens and targets themselves.
  Tensor host_tokens, host_targets, host_losses;
  Arena host;            // what the host tensors above live in (a device model only)
  StreamEvent uploaded;  // the copy up of host_tokens / host_targets (a device model only)
  bool training = true;  // dropout on, activations saved for backward
  // Made by make_micro_batch(training = true): its arenas can hold a training forward.
  bool sized_for_training = true;
  uint64_t seed = 0;   // run seed (dropout masks)
  uint64_t step = 0;   // optimizer step (dropout masks)
  uint64_t seq0 = 0;   // global index of sequence 0 in the step's global batch (dropout masks)
  int index = 0;       // micro-batch index within the step (gradient completion)
  float dloss = 1.0f;  // d(objective)/d(mean loss of this micro-batch): 1/grad_accum * scale
  Tracer* tracer = nullptr;  // where GPT's block parts record their spans (trace.h); nullptr: off

  Arena saved;  // activations kept from forward to backward
  // CPU checkpointing (ModelOptions::cpu_checkpointing): the host pool the partitioned block
  // inputs go to instead of `saved` (ZeRO-R offloads activation checkpoints to CPU memory; on
  // a CPU build a separate arena with its own byte counter). Empty otherwise.
  Arena host_checkpoints;
  // On a device: the copy down of the last block input's slice into host_checkpoints, which
  // the next write of that input's buffer waits for (BlockEnv::before_boundary_write).
  std::optional<StreamEvent> checkpoint_down;
  Arena workspace;               // temporaries of one block part (rewound after every F, B and W)
  StashPool* stash = nullptr;    // where B leaves W's inputs (shared by micro-batches)
  std::vector<int> stash_slot;   // per block: the slot held between its B and W, or -1
  Arena* stash_arena = nullptr;  // the slot of the block whose B is running
  // The running block part's hold on its parameters: a transformer block calls
  // params->use(group) before each op (model/group_access.h). Set by GPT around each part.
  GroupAccess* params = nullptr;
  std::vector<Tensor> residual;  // L+1 block boundaries, each (B,T,C); residual[0] = embedding
  Tensor dresidual;              // (B,T,C) gradient flowing down the residual stream
  std::vector<std::vector<Tensor>> block_saved;  // per block, the block's own saved tensors
  size_t saved_mark = 0;  // mb.saved position after the buffers above (per-forward state follows)
  float loss = 0.0f;      // mean loss over the micro-batch (after forward)
  // A device model's training step reads the losses without a wait per forward (the engine
  // sets defer_loss): the head queues their copy down and records losses_down; loss,
  // seq_loss_sum and seq_targets are then set by GPT::finish_loss, before the next forward.
  bool defer_loss = false;
  bool loss_pending = false;
  StreamEvent losses_down;
  std::vector<double> seq_loss_sum;  // per sequence: sum of its position losses (after forward)
  std::vector<int64_t> seq_targets;  // per sequence: positions with a target
  bool keep_logits = false;          // evaluation: keep the head's logits in `logits` (sampling)
  Tensor logits;                     // (B,T,V), set by the head when training or keep_logits
  // The head's training forward ran the fused classifier: `logits` holds d(objective)/d(logits)
  // already (head_loss_forward), and the backward's cross-entropy part is done.
  bool logits_hold_gradient = false;
  std::unique_ptr<StashPool> own_stash;  // a one-slot pool when no engine shares one
};

// Everything a block needs besides the micro-batch: model shape, op context, chunk store,
// and the tensor-parallel group (nullptr: no tensor parallelism).
struct BlockEnv {
  const GPTConfig* config = nullptr;
  ActivationPolicy policy = ActivationPolicy::SAVE_ALL;
  OpContext op;
  // The copy stream (ModelOptions::copies, or op): cpu_checkpointing's slices go down and up
  // on it, beside the ops.
  OpContext copies;
  ChunkStore* store = nullptr;
  ProcessGroup* tp = nullptr;
  // The Llama family with kv heads replicated over the tp ranks (n_kv_head < t, layout.h): the
  // ranks holding this rank's kv head; nullptr otherwise.
  ProcessGroup* kv_group = nullptr;
  // Sequence parallelism (with tp): the residual stream, layernorms, residual dropout and adds
  // run on sequence shards: every sequence's positions [r T/t, (r+1) T/t) on tp rank r, as
  // (B,T/t,C) tensors. (B,T,C) is kept as the layout; the collectives below permute between
  // the (B,T/t,C) shards and the (t,B,T/t,C) order they travel in.
  bool sp = false;
  // ZeRO-R P_a (ModelOptions::partition_activations; FULL policy, tp, no SP): each transformer
  // block keeps only this rank's contiguous 1/t of its flattened (B,T,C) input from F to B, in
  // mb.saved or, with cpu_checkpointing, in mb.host_checkpoints; B all-gathers it whole.
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  // The activations' dtype: the compute dtype (PARAM's), as DeepSpeed's bf16/fp16 run the
  // module in it. Statistics (layernorm's mean and rstd, the losses) and the logits stay f32.
  DType act = DType::F32;
  // The Llama family: RoPE's inverse frequencies (head_size/2) f32 on the model's device
  // (rope_inv_freq of GPTConfig::rope_spec()); undefined for GPT-2.
  Tensor rope_inv_freq;

  // An activation (shape) from `arena`, and a (shape) tensor of `dtype`, zeroed by an op on
  // this context's stream (the host never writes device memory itself: kernels/mover.h).
  Tensor zeros(Arena& arena, Shape shape) const { return zeros(arena, shape, act); }
  Tensor zeros(Arena& arena, Shape shape, DType dtype) const;

  int tp_size() const { return tp ? tp->size() : 1; }
  // The vocabulary-parallel ends: this rank's rows [vocab_begin, + vocab_cols) of wte (the
  // logit columns; the padding rows of the last ranks excluded); the whole vocabulary without
  // tensor parallelism. head_weight: those rows of a (V/t padded, C) head weight or gradient.
  int64_t vocab_begin() const;
  int64_t vocab_cols() const;
  Tensor head_weight(Tensor w) const;
  int tp_rank() const { return tp ? tp->rank() : 0; }
  // Positions of a sequence this rank holds in the residual stream, and the first of them.
  int64_t seq_local(int64_t T) const { return sp ? T / tp_size() : T; }
  int64_t seq_begin(int64_t T) const { return sp ? tp_rank() * (T / tp_size()) : 0; }
  // Megatron's g operator (forward of a row-parallel output, backward of a column-parallel
  // input): sums the ranks' partial (B,T,C) in place; nothing without tensor parallelism.
  // On a device every tensor-parallel collective first waits for the stream (it reads what the
  // ops wrote); the ops queued after it read what it wrote.
  void tp_all_reduce(Tensor partial) const;
  // ZeRO-R P_a: rank r's contiguous elements [r n, (r+1) n) of the flattened block input `x`
  // (n = B T C / t), kept from F to B in mb.saved, or under cpu_checkpointing in
  // mb.host_checkpoints, copied down on the copy stream.
  Tensor keep_input_slice(MicroBatch& mb, const Tensor& x) const;
  // Before a block writes its output boundary: under P_a that is the buffer of the previous
  // block's input (ping-pong), whose copy down the stream waits for (no host wait).
  void before_boundary_write(const MicroBatch& mb) const;
  // The block input (B,T,C) whole from the ranks' slices `slice` (this rank's part, on the
  // device, or on the host under cpu_checkpointing: copied up on the copy stream first).
  void tp_gather_slices(Tensor slice, Tensor whole) const;
  // The partial sums `full` (B,T,C) of a row-parallel linear, or the partial gradient of a
  // column-parallel input, completed: under SP reduce-scattered into this rank's sequence
  // shard (B,T/t,C), allocated from `out` (scratch from `scratch`); otherwise all-reduced in
  // place (tensor parallelism) or left as is, and returned.
  Tensor to_shard(Tensor full, Arena& out, Arena& scratch) const;
  // A sequence shard (B,T/t,C) made whole (B,T,C), allocated from `out`: under SP all-gathered
  // (scratch from `scratch`); otherwise the shard itself is whole and returned.
  Tensor to_full(Tensor shard, Arena& out, Arena& scratch) const;
  // Under SP, the gradient of a replicated parameter computed from this rank's sequence shard
  // only (layernorm weights and biases): `partial` (in a scratch tensor, zeroed before the
  // op) is all-reduced and added to `grad`. `partial`: several gradients side by side.
  void add_sp_partial_grads(Tensor partial, const std::vector<Tensor>& grads) const;
  // With replicated kv heads (kv_group), qkv_proj's weight (and bias) gradient of this
  // micro-batch: `partial` holds [dW (Wl,C) | db (Wl) with a bias] in f32, computed from this
  // rank's query heads only; its k and v rows (each tensor's rows from `q_rows` on) are summed
  // over kv_group (every copy then holds the whole head's gradient, bitwise the same), and the
  // whole is added to `grad_w` (and `grad_b`) as add_sp_partial_grads adds.
  void add_kv_replica_grads(Tensor partial, int64_t q_rows, Tensor grad_w, Tensor grad_b) const;

  // grads[i] += its part of `partial` (the tensors side by side, in that order).
  void add_partials(Tensor partial, const std::vector<Tensor>& grads) const;

  Tensor param(int id) const { return store->tensor(ChunkKind::PARAM, id); }
  Tensor grad(int id) const { return store->tensor(ChunkKind::GRAD, id); }
  // The dropout spec of `site` of `layer` (-1: the embedding) for an activation of unsharded
  // width `width` (features; heads for attention probabilities) whose first column (head) is
  // `col0` of it (a tensor-parallel shard), keyed by global coordinates.
  DropoutSpec dropout(const MicroBatch& mb, int layer, int site, int64_t width,
                      int64_t col0 = 0) const;
  // The same for an activation of the residual stream (B,T/t,W) under SP (positions from
  // seq_begin), (B,T,W) otherwise.
  DropoutSpec seq_dropout(const MicroBatch& mb, int layer, int site, int64_t width) const;
};

class Block {
 public:
  virtual ~Block() = default;
  virtual void forward(MicroBatch& mb) = 0;
  virtual void backward_input(MicroBatch& mb) = 0;
  virtual void backward_weight(MicroBatch& mb) = 0;
  // Chunk-store ids of the parameters this block reads (acquired around each part).
  const std::vector<int>& param_ids() const { return param_ids_; }
  // Bytes this block keeps in mb.saved, needs at most in mb.workspace during one part, and
  // leaves in its stash from B to W, for (B,T).
  virtual size_t saved_bytes(int B, int T) const = 0;
  virtual size_t workspace_bytes(int B, int T) const = 0;
  virtual size_t stash_bytes(int B, int T) const = 0;

 protected:
  std::vector<int> param_ids_;
};

// The shape arena_bytes.h sizes a block's arenas by, from its environment.
ArenaShape arena_shape(const BlockEnv& env);

// A head's last step of forward: the per-position losses (B,T) f32 (on a device copied down
// to mb.host_losses first) summed per sequence into mb.seq_loss_sum / seq_targets and averaged
// into mb.loss.
void record_losses(const BlockEnv& env, MicroBatch& mb, Tensor losses);
// The per-sequence sums and the mean of the head's per-position losses (B,T) f32 on the host.
void sum_losses(MicroBatch& mb, const float* losses);

// The head's loss (GPT-2's and the Llama family's): the per-position cross-entropy of `logits`
// (B,T,V; this rank's vocabulary columns under tensor parallelism) recorded in mb
// (record_losses). Under tensor parallelism also the row maxima and sums backward needs,
// allocated from `keep` and returned (undefined tensors otherwise). A training forward without
// tensor parallelism also writes d(loss)/d(logits) over the logits (the fused classifier,
// mb.logits_hold_gradient), which leaves head_loss_backward nothing to do.
std::pair<Tensor, Tensor> head_loss_forward(const BlockEnv& env, MicroBatch& mb, Tensor logits,
                                            Arena& keep);
// d(loss)/d(logits) in place: each counted position's 1/counted of the mean, times mb.dloss.
void head_loss_backward(const BlockEnv& env, const MicroBatch& mb, Tensor logits, Tensor lse_max,
                        Tensor lse_sum);

}  // namespace tide
