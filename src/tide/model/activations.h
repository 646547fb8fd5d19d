#pragma once
// What a transformer block keeps from its forward pass for its backward pass.
//
//   SAVE_ALL   keep every intermediate (fastest, most memory: the (B,NH,T,T) attention
//              matrices dominate at long sequence lengths)
//   SELECTIVE  Korthikanti et al.'s selective recomputation: keep everything except the
//              attention core (QK^T, softmax, dropout, AV); recompute it from the saved Q,K,V
//   FULL       keep only the block input; recompute the whole block before its backward
//
// Dropout masks come from a counter-based RNG keyed by (step, micro-batch, layer, site), so a
// recomputation reproduces them exactly and all three policies give bitwise-identical
// gradients.

#include <string>

namespace tide {

enum class ActivationPolicy { SAVE_ALL, SELECTIVE, FULL };

// "none" or "save-all" -> SAVE_ALL, "selective", "full"; throws a tide::Error otherwise.
ActivationPolicy parse_activation_policy(const std::string& s);
const char* activation_policy_name(ActivationPolicy p);

}  // namespace tide
