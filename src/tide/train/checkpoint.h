#pragma once
// Checkpoints of the model weights: one file, self-describing and checked.
//
//   "TIDECKPT" (8 bytes) | version u32 = 1 | header length u64 | header JSON |
//   f32 tensor data, in the header's order | FNV-1a 64 checksum of the data (u64)
//
// The header holds the model shape, the step, each tensor's name and shape, and the name of
// the tokenizer file saved beside the checkpoint. Loading verifies everything and names what
// is wrong (not a checkpoint, other version, truncated, checksum mismatch, shape mismatch).

#include <nlohmann/json.hpp>
#include <string>

#include "tide/model/gpt.h"

namespace tide {

struct CheckpointInfo {
  GPTConfig config;
  int64_t step = 0;
  std::string tokenizer;  // path of the tokenizer (relative paths: to the checkpoint's folder)
  nlohmann::json extra;   // anything else the trainer stored
};

// Writes the PARAM (f32) tensors of `model` to `path` (atomically: a temp file renamed).
void save_checkpoint(const std::string& path, const GPT& model, const CheckpointInfo& info,
                     bool with_optimizer_state = false);
// Reads only the header.
CheckpointInfo read_checkpoint_info(const std::string& path);
// Loads the weights into `model`, whose config must match the checkpoint's.
void load_checkpoint(const std::string& path, GPT& model, bool with_optimizer_state = false);

}  // namespace tide
