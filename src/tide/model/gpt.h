#pragma once
// GPT-2, or a model of the Llama family (GPTConfig::family; llama_blocks.h), as a list of
// blocks over a chunk store.
//
//   blocks[0]          EmbeddingBlock     tokens -> residual[0]
//   blocks[1..L]       TransformerBlock   residual[l-1] -> residual[l]
//   blocks[L+1]        HeadBlock          residual[L] -> loss
//
// Parameters come from the per-rank layout (layout.h), in forward-use order; the LM head is
// tied to wte.
//
// Built for one stage of a pipeline (ModelOptions::pp, stage), the model holds only that
// stage's blocks and parameters: the embedding on stage 0, layers [stage L/pp, (stage+1) L/pp),
// the head on the last stage, which reads `lm_head.weight` (its own copy of the tied wte, with
// the same initial values) when pp > 1. Block indices (block(i), the *_block parts) are then
// local to the stage; layers, residual indices and dropout keys stay global. A stage that does
// not start with the embedding takes its input activation from outside (input_activation, the
// previous stage's output_activation), and one that does not end with the head its output
// gradient (residual_grad, the next stage's, after its first block's B). Names follow Hugging
// Face's GPT-2 ("h.3.attn.c_attn.weight"), with linear weights stored (out, in) as in PyTorch's
// nn.Linear.
//
// Every op of a block part runs between store.acquire(its parameter group) and
// store.release(...) (param_groups.h, group_access.h): the model never moves memory or sets
// tensor states itself, and runs with parameters that are not resident until acquired (the
// placement policy fetches them).

#include <memory>
#include <vector>

#include "tide/model/blocks.h"
#include "tide/model/group_access.h"
#include "tide/model/layout.h"

namespace tide {

struct ModelOptions {
  int64_t chunk_elems = 0;  // target chunk size; 0: the largest tensor
  int group_size = 1;       // ranks every chunk is sliced over (DP degree)
  StoreOptions store;
  int pp = 1;     // pipeline stages the model is split over
  int stage = 0;  // the stage this model holds, in [0, pp)
  // Tensor parallelism (Megatron-LM) over this group: the model holds its rank's shards
  // (layout.h) and every block part communicates over it (blocks.h), so all ranks of the group
  // must run the same parts in the same order. nullptr (or a group of 1): no tensor
  // parallelism. On the CPU or the simulated device (vocab_parallel.h: CPU kernels).
  std::shared_ptr<ProcessGroup> tp;
  // Sequence parallelism over the tp group (Korthikanti et al.): the residual stream of a
  // micro-batch is (B,T/t,C) per rank, positions [r T/t, (r+1) T/t) of every sequence
  // (input_activation, output_activation, residual_grad are shards). Needs tp; T must divide
  // by t.
  bool sequence_parallel = false;
  // The Llama family with fewer key/value heads than tp ranks (layout.h): the ranks of the tp
  // group that hold the same kv head, over which the model sums that head's weight gradients.
  // nullptr: the model makes it from tp (GPT's constructor is then collective over tp), as
  // ProcessGroup::split(tp_rank / replicas, tp_rank); host_copy passes the model's own.
  std::shared_ptr<ProcessGroup> kv_group;
  // ZeRO-R P_a (Rajbhandari et al., section 6.1): under the FULL activation policy with tp > 1,
  // each transformer block keeps only this rank's contiguous 1/t slice of its input (the
  // flattened (B,T,C) residual entry) from forward to backward, and all-gathers it over the tp
  // group before its recomputation in B: one all-gather of (B,T,C) per layer per B, results
  // bitwise equal (only storage changes). The micro-batch then holds two whole residual
  // buffers (ping-pong, for the forward) instead of one per layer boundary. Errors: without
  // the FULL policy (nothing else is a block-input checkpoint), without tp > 1 (nothing to
  // partition over), and under sequence_parallel (the block inputs are already 1/t sequence
  // shards: nothing more to partition).
  // The Trainer passes DeepSpeed's activation_checkpointing.partition_activations here (with
  // its activation policy "full" and tensor_parallel.size > 1).
  bool partition_activations = false;
  // With partition_activations: the slices go to a separate host pool
  // (MicroBatch::host_checkpoints) instead of the micro-batch's activation arena (`saved`, the
  // "device" pool). Needs partition_activations. The Trainer passes
  // activation_checkpointing.cpu_checkpointing here.
  bool cpu_checkpointing = false;
  // The execution context every op of the model runs on (the device, its compute stream) and
  // the memory its activations (micro-batch arenas, W stashes) come from: nullptr, the host.
  // On a device (sim:N, cuda:N) the chunk store's kinds must be allocated on it too
  // (store.compute and store.optimizer), and the host reaches the model's memory only through
  // the mover (kernels/mover.h): tokens and targets go up from MicroBatch::host_tokens /
  // host_targets, the per-position losses come back into host_losses. On a GPU tensor
  // parallelism is refused (its vocabulary-parallel ops are CPU kernels, vocab_parallel.h).
  OpContext op;
  // On a device: the context of the copies between host and device that overlap `op`'s ops
  // (make_copy_context: a stream of their own; ZeRO-Offload's gradient and parameter slices).
  // Unset (a CPU context): `op`'s stream carries them too.
  OpContext copies;
  Allocator* activations = nullptr;
  // On a device: where the host ends of the model's copies live (the micro-batches' host
  // tokens, targets and losses, cpu_checkpointing's pool, the policy stack's gradient sums):
  // page-locked memory (make_host_allocator), so the copies overlap compute. nullptr: the host
  // heap, where on a GPU each such copy blocks the host.
  Allocator* host_staging = nullptr;
};

class GPT {
 public:
  GPT(const GPTConfig& config, ActivationPolicy policy, const ModelOptions& options);
  GPT(const GPTConfig& config, ActivationPolicy policy, int64_t chunk_elems = 0,
      bool with_optimizer = true, int group_size = 1);
  // On a device: waits for the stream before the chunks go (ops queued on them may still run).
  ~GPT();
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const GPTConfig& config() const { return config_; }
  ActivationPolicy policy() const { return env_.policy; }
  RankCoords coords() const { return {env_.tp_size(), env_.tp_rank(), pp_, stage_}; }
  ChunkStore& store() { return *store_; }
  const ChunkStore& store() const { return *store_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  Block& block(int i) { return *blocks_[i]; }
  // The groups block i acquires its parameters in (param_groups.h), and all blocks' groups.
  const BlockGroups& block_groups(int i) const { return groups_[i]; }
  const std::vector<BlockGroups>& all_block_groups() const { return groups_; }
  // Pipeline placement: stages, this model's stage, its transformer layers [first, end).
  int pp() const { return pp_; }
  int stage() const { return stage_; }
  int first_layer() const { return first_layer_; }
  int end_layer() const { return end_layer_; }
  bool has_embedding() const { return stage_ == 0; }
  bool has_head() const { return stage_ == pp_ - 1; }
  // Tensor parallelism: the group's size and this rank's index in it (1 and 0 without).
  int tp() const { return env_.tp_size(); }
  int tp_rank() const { return env_.tp_rank(); }
  ProcessGroup* tp_group() const { return env_.tp; }  // nullptr without tensor parallelism
  const std::shared_ptr<ProcessGroup>& tp_group_ptr() const { return tp_group_; }
  // The ranks sharing this rank's replicated kv head (ModelOptions::kv_group); nullptr when
  // every kv head is on one rank.
  const std::shared_ptr<ProcessGroup>& kv_group_ptr() const { return kv_group_; }
  bool sequence_parallel() const { return env_.sp; }
  bool partition_activations() const { return env_.partition_activations; }
  bool cpu_checkpointing() const { return env_.cpu_checkpointing; }
  // The context the model's ops run on and where its activations live (ModelOptions).
  const OpContext& op() const { return env_.op; }
  const OpContext& copies() const { return copies_; }  // ModelOptions::copies, or op()
  // On the simulated device: how often the host has waited for the streams of op() and
  // copies() (SimStream::synchronizations); 0 elsewhere.
  uint64_t sim_host_waits() const;
  Allocator* activation_allocator() const { return activations_; }
  Allocator* host_staging_allocator() const { return host_staging_; }

  // The stage boundaries of a micro-batch, each (B,T,C). input_activation: what the stage's
  // first transformer block reads (written by the embedding on stage 0; elsewhere fill it
  // before forward). output_activation: what its last transformer block writes (the next
  // stage's input). residual_grad: the gradient flowing down the residual stream; on a stage
  // without the head fill it with d(loss)/d(output_activation) before the first B, and after
  // the B of the stage's first transformer block it holds d(loss)/d(input_activation).
  Tensor input_activation(MicroBatch& mb) const { return mb.residual[first_layer_]; }
  Tensor output_activation(MicroBatch& mb) const { return mb.residual[end_layer_]; }
  Tensor residual_grad(MicroBatch& mb) const { return mb.dresidual; }

  // GPT-2 initialisation from `seed`: weights N(0, 0.02), the two residual projections
  // (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2L)), biases 0, layernorm weights 1. The Llama
  // family: transformers' (initializer_range 0.02): matrices and the embedding N(0, 0.02),
  // RMSNorm weights 1, the qkv bias 0.
  // Every stage and tensor-parallel shard draws the single-rank model's values for the
  // elements it holds (the vocabulary padding rows are 0).
  void init_weights(uint64_t seed);

  // A micro-batch of shape (B,T) with its activation arenas. `stash` is the pool B->W stashes
  // come from (shared by the micro-batches of an engine, sized from its schedule); nullptr
  // gives the micro-batch a pool of its own for one stash (B and W fused per block).
  // `training` = false: a micro-batch for evaluation only (forward with training = false): its
  // arenas hold no activations kept for backward and it has no stash (the trainer's validation
  // micro-batch; a training forward on it is an error).
  // Throws a tide::Error when T exceeds max_seq_len.
  std::unique_ptr<MicroBatch> make_micro_batch(int B, int T, StashPool* stash = nullptr,
                                               bool training = true) const;
  // Bytes of the largest (micro-batch, block) stash at (B,T): the slot size of a StashPool.
  size_t stash_slot_bytes(int B, int T) const;

  // Where the caller writes a micro-batch's tokens and targets (B,T) before forward: the host
  // tensors mb.host_tokens and mb.host_targets (on the CPU, mb.tokens and mb.targets
  // themselves). On a device this first waits until the previous forward's copy up has read
  // them.
  struct HostBatch {
    int32_t* tokens;
    int32_t* targets;
  };
  HostBatch host_batch(MicroBatch& mb) const;

  // Forward through every block; returns the mean loss (also in mb.loss; 0 on a stage without
  // the head). Before calling, fill the host batch (host_batch) and set mb.training, mb.step,
  // mb.seq0, mb.dloss. On a device the tokens and targets are copied up first. With
  // mb.defer_loss on a device the loss is not known yet: finish_loss gives it.
  float forward(MicroBatch& mb);
  // The loss of mb's last forward: with a deferred readback (MicroBatch::defer_loss) it waits
  // for the losses' copy down (done already once the host has waited for anything queued
  // later) and sums them; before the next host_batch, which overwrites the targets it reads.
  float finish_loss(MicroBatch& mb) const;
  // Backward through every block (B then W per block, in reverse order), accumulating into the
  // GRAD chunks. With `mark_grads`, reports each gradient complete for micro-batch mb.index as
  // soon as its last contribution is in (the store's on_grads_ready hook).
  void backward(MicroBatch& mb, bool mark_grads = false);

  // Per-block parts, for the engine and pipeline executors. Any order is legal that runs
  // F(mb, i) after F(mb, i-1), B(mb, i) after B(mb, i+1), and W(mb, i) after B(mb, i). For
  // gradients bitwise equal to the fused order, each parameter must receive its W
  // contributions in micro-batch order: the tied wte is written by the head's and the
  // embedding's W, so W(embedding, m) must run before W(head, m+1) (running W a micro-batch at
  // a time, as the engine does, guarantees it).
  void forward_block(MicroBatch& mb, int i);
  void backward_input_block(MicroBatch& mb, int i);
  void backward_weight_block(MicroBatch& mb, int i, bool mark_grads);

 private:
  // Sets kv_group_ and env_.kv_group when kv heads are replicated over the tp ranks: `given`
  // (ModelOptions::kv_group) or a split of the tp group.
  void make_kv_group(std::shared_ptr<ProcessGroup> given);
  GPTConfig config_;
  int pp_ = 1, stage_ = 0;
  int first_layer_ = 0, end_layer_ = 0;     // this stage's transformer layers
  std::shared_ptr<ProcessGroup> tp_group_;  // kept alive for env_.tp
  std::shared_ptr<ProcessGroup> kv_group_;  // kept alive for env_.kv_group
  Allocator* activations_ = nullptr;        // ModelOptions::activations
  Allocator* host_staging_ = nullptr;       // ModelOptions::host_staging
  BlockEnv env_;
  OpContext copies_;
  std::unique_ptr<ChunkStore> store_;
  Arena rope_;  // the Llama family: env_.rope_inv_freq, on the model's device
  std::vector<std::unique_ptr<Block>> blocks_;
  // Per block, its parameter groups and the gradients each group's W completes
  // (param_groups.h; wte: only after the embedding, the last of its two users in backward
  // order).
  std::vector<BlockGroups> groups_;

  // Throws a tide::Error when the options put the ops and the memory on different devices, or
  // ask a device for what runs only on the host.
  void check_device(const ModelOptions& o) const;
  // The Llama family's blocks (llama_blocks.h) and RoPE's table in rope_.
  void build_llama_blocks();
  void run_part(MicroBatch& mb, int i, GroupAccess& access, void (Block::*part)(MicroBatch&));
};

}  // namespace tide
