#include "tide/config/tensor_parallel_settings.h"

#include "tide/core/error.h"
#include "tide/model/layout.h"

namespace tide {

void check_tensor_parallel_settings(const TrainConfig& c) {
  const int t = c.tensor_parallel;
  const GPTConfig& m = c.model;
  TIDE_CHECK(!c.sequence_parallel || t > 1,
             "tensor_parallel.sequence_parallel=true shards the sequence over the "
             "tensor-parallel ranks, and tensor_parallel.size is 1; set tensor_parallel.size "
             "to 2 or more, or sequence_parallel to false");
  // Hidden size first: n_embd = n_head * head_size, so a size that fails here fails for the
  // heads too, and this message is the more direct one.
  TIDE_CHECK(m.n_embd % t == 0,
             "model.n_embd ({}) is not divisible by tensor_parallel.size ({}): the hidden size "
             "is split evenly over the tensor-parallel ranks; choose a size that divides {}",
             m.n_embd, t, m.n_embd);
  TIDE_CHECK(m.n_head % t == 0,
             "model.n_head ({}) is not divisible by tensor_parallel.size ({}): each "
             "tensor-parallel rank computes n_head/size whole heads; choose a size that divides "
             "{}",
             m.n_head, t, m.n_head);
  TIDE_CHECK(!c.sequence_parallel || c.seq_len % t == 0,
             "seq_len ({}) is not divisible by tensor_parallel.size ({}) under "
             "tensor_parallel.sequence_parallel, which gives each rank seq_len/size positions; "
             "use a multiple of {} or turn sequence_parallel off",
             c.seq_len, t, t);
  // The vocabulary is padded to a multiple of t (ceil(V/t) rows per rank); the last rank must
  // still hold a real row. (vocab_size 0 comes from the data: the model checks it then.)
  if (t > 1 && m.vocab_size > 0) {
    const int64_t rows = vocab_rows_per_rank(m, t);
    TIDE_CHECK(int64_t{m.vocab_size} > (t - 1) * rows,
               "model.vocab_size ({}) padded to a multiple of tensor_parallel.size ({}) gives "
               "{} rows per rank and leaves the last rank no real row; use a smaller "
               "tensor_parallel.size",
               m.vocab_size, t, rows);
  }
  if (c.partition_activations) {
    TIDE_CHECK(c.activation_policy == ActivationPolicy::FULL,
               "activation_checkpointing.partition_activations partitions the block inputs "
               "that the full recompute policy keeps, and activation_checkpointing.policy is "
               "'{}'; set the policy to full, or partition_activations to false",
               activation_policy_name(c.activation_policy));
    TIDE_CHECK(t > 1,
               "activation_checkpointing.partition_activations slices the block inputs over "
               "the tensor-parallel ranks, and tensor_parallel.size is 1; set "
               "tensor_parallel.size to 2 or more, or partition_activations to false");
    TIDE_CHECK(!c.sequence_parallel,
               "activation_checkpointing.partition_activations with "
               "tensor_parallel.sequence_parallel: the block inputs are already 1/{} sequence "
               "shards, nothing more to partition; turn one of them off",
               t);
  }
  TIDE_CHECK(!c.cpu_checkpointing || c.partition_activations,
             "activation_checkpointing.cpu_checkpointing moves the partitioned block inputs to "
             "host memory and needs activation_checkpointing.partition_activations=true; turn "
             "it on, or cpu_checkpointing off");
}

}  // namespace tide
