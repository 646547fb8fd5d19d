#pragma once
// The tensor_parallel.* keys and the ZeRO-R P_a keys (activation_checkpointing.
// partition_activations / cpu_checkpointing) of a train config, checked together. Why a file
// of its own: the checks need the model shape, seq_len and the activation policy at once, and
// they must fire at config time (before the Trainer writes anything, and for `tide estimate`
// too), naming the keys the user wrote; the model's own checks (gpt.cpp) name ModelOptions.

#include "tide/config/config.h"

namespace tide {

// Every combination a tensor-parallel run cannot have, each a one-line error naming the key
// and the fix: sequence_parallel without tensor_parallel.size > 1; model.n_embd or
// model.n_head not divisible by the size; seq_len not divisible by it under sequence
// parallelism; a vocabulary (when known) that leaves the last rank no row after padding to a
// multiple of the size; partition_activations without policy full, without tensor
// parallelism or with sequence parallelism; cpu_checkpointing without partition_activations.
void check_tensor_parallel_settings(const TrainConfig& c);

}  // namespace tide
