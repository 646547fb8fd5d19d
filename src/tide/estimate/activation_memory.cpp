#include "tide/estimate/activation_memory.h"

#include "tide/core/error.h"
#include "tide/model/layout.h"

namespace tide {
namespace {

// Each function returns bytes on one TP rank for one layer and one micro-batch.

int64_t norm_statistics(const ActivationShape& x) {
  return (x.llama ? 2 : 4) * x.s * x.b * 4;
}

// Parts that tensor parallelism leaves replicated (split only by sequence parallelism):
// the layer norm inputs, QKV and MLP fc inputs (4 sbh elements) and, in GPT-2, two dropout
// masks; and, beyond the table, the norms' f32 statistics the runtime keeps (GPT-2: each
// LayerNorm's mean and rstd, 4 sb values; Llama: each RMSNorm's rstd, 2 sb).
int64_t replicated_part(const ActivationShape& x) {
  const int64_t sb = x.s * x.b, sbh = sb * x.h;
  const int64_t bytes = 4 * sbh * x.elem_bytes + (x.llama ? 0 : 2 * sbh) + norm_statistics(x);
  return x.sp ? bytes / x.t : bytes;
}

// Parts tensor parallelism splits: Q, K, V and the attention projection input (GPT-2: 4 sbh
// elements; Llama: sb(2h + 2kv)), and the MLP's hidden (GPT-2: the GeLU input and output, 8
// sbh; Llama: gate, up and their SwiGLU product, 3 sbf).
int64_t split_part(const ActivationShape& x) {
  const int64_t sb = x.s * x.b;
  const int64_t elems = x.llama ? sb * (2 * x.h + 2 * x.kv + 3 * x.ffn) : 12 * sb * x.h;
  return elems * x.elem_bytes / x.t;
}

// The attention core, heads split over t: the op keeps each row's log-sum-exp (a s b values,
// f32 whatever the precision) and recomputes the probabilities in backward, so Megatron's
// 5 a s^2 b (probabilities, dropout output and mask) is never held.
int64_t attention_core(const ActivationShape& x) {
  return int64_t{4} * x.a * x.s * x.b / x.t;
}

// Full recompute keeps the layer input, which is sequence-split under SP; P_a keeps the rank's
// 1/t slice of it (on the host with CPU checkpointing).
int64_t layer_input(const ActivationShape& x) {
  const int64_t bytes = x.s * x.b * x.h * x.elem_bytes;
  if (x.partition) return x.cpu_checkpointing ? 0 : bytes / x.t;
  return x.sp ? bytes / x.t : bytes;
}

bool partitioned(const ActivationShape& x, Recompute policy) {
  return x.partition && policy == Recompute::Full;
}

}  // namespace

int64_t layer_activation_bytes(const ActivationShape& x, Recompute policy) {
  TIDE_ASSERT(x.t >= 1 && x.h % x.t == 0 && x.a % x.t == 0);
  TIDE_ASSERT(!x.sp || x.s % x.t == 0);
  switch (policy) {
    case Recompute::None:
      return replicated_part(x) + split_part(x) + attention_core(x);
    case Recompute::Selective:
      return replicated_part(x) + split_part(x);
    case Recompute::Full:
      return layer_input(x);
  }
  TIDE_ASSERT(false);
}

int64_t recompute_workspace_bytes(const ActivationShape& x, Recompute policy) {
  switch (policy) {
    case Recompute::None:
      return 0;
    case Recompute::Selective:
      return attention_core(x);
    case Recompute::Full:  // under P_a also the gathered layer input
      return layer_activation_bytes(x, Recompute::None) + partition_buffer_bytes(x, policy);
  }
  TIDE_ASSERT(false);
}

int64_t backward_workspace_bytes(const ActivationShape& x) {
  const int64_t sb = x.s * x.b, sbh = sb * x.h;
  const int64_t split = x.llama ? sb * (x.ffn + 2 * x.h + 2 * x.kv) : 5 * sbh;
  return (split / x.t + (x.sp ? 2 * sbh : 0)) * x.elem_bytes;
}

int64_t partition_buffer_bytes(const ActivationShape& x, Recompute policy) {
  return partitioned(x, policy) ? x.s * x.b * x.h * x.elem_bytes : 0;
}

int64_t host_checkpoint_bytes(const ActivationShape& x, Recompute policy) {
  return partitioned(x, policy) && x.cpu_checkpointing ? x.s * x.b * x.h * x.elem_bytes / x.t : 0;
}

int64_t input_layer_activation_bytes(const ActivationShape& x) {
  if (x.llama) return 0;
  const int64_t sbh = x.s * x.b * x.h;
  return x.sp ? sbh / x.t : sbh;
}

int64_t output_layer_activation_bytes(const ActivationShape& x) {
  const int64_t sbh = x.s * x.b * x.h;
  // The final norm's input and output, and (beyond the paper) its f32 statistics: LayerNorm's
  // mean and rstd, RMSNorm's rstd.
  const int64_t norm = 2 * sbh * x.elem_bytes + (x.llama ? 1 : 2) * x.s * x.b * 4;
  const int64_t vocab_per_rank = (x.v + x.t - 1) / x.t;   // vocabulary-parallel head
  const int64_t logits = 4 * x.s * x.b * vocab_per_rank;  // fp32 for the cross-entropy
  return (x.sp ? norm / x.t : norm) + logits;
}

int64_t stage_boundary_bytes(const ActivationShape& x) {
  const int64_t bytes = 2 * x.s * x.b * x.h * x.elem_bytes;
  return x.sp ? bytes / x.t : bytes;
}

ActivationShape activation_shape(const TrainSetup& setup) {
  const GPTConfig& m = setup.model;
  ActivationShape x;
  x.s = setup.seq();
  x.b = setup.micro_batch;
  x.h = m.n_embd;
  x.a = m.n_head;
  x.v = m.vocab_size;
  x.t = setup.tp;
  x.sp = setup.sp && setup.tp > 1;
  x.elem_bytes = bytes_per_param(setup.precision);
  x.partition = setup.partition_activations && setup.tp > 1 && !x.sp;
  x.cpu_checkpointing = x.partition && setup.cpu_checkpointing;
  x.llama = m.is_llama();
  // Summed over the t ranks: with fewer kv heads than ranks each rank holds one (layout.h).
  x.kv = x.llama ? kv_heads_per_rank(m, x.t) * x.t * m.head_size()
                 : int64_t{m.kv_heads()} * m.head_size();
  x.ffn = m.ffn_size();
  return x;
}

}  // namespace tide
