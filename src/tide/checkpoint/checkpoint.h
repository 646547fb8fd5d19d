#pragma once
// Checkpoints: the model (and optionally the optimizer state) as one safetensors file with a
// checksummed metadata block (safetensors.h), so that Hugging Face tools can read the weights
// and a damaged file is refused instead of trained on.
//
// Tensors, under the chunk layout's names ("wte", "h.0.attn.c_attn.weight", ...):
//   <name>          the parameters (PARAM, in the compute dtype)
//   master.<name>   fp32 master weights, only when the compute dtype is not f32 (with f32 they
//                   are the parameters)                                 } with optimizer
//   adam_m.<name>, adam_v.<name>  Adam's moments (f32)                  } state only
// The tide metadata: {"model": {n_layer, n_head, n_embd, vocab_size, max_seq_len, dropout},
// "step", "tokenizer", "extra" (the trainer's config and run state), "optimizer_state"}.
//
// Loading checks the model shape, every tensor's name, dtype and shape, and the checksum of
// the whole file before anything is copied into the model.

#include <nlohmann/json.hpp>
#include <string>

#include "tide/model/gpt.h"

namespace tide {

struct CheckpointInfo {
  GPTConfig config;
  int64_t step = 0;
  std::string tokenizer;  // path of the tokenizer (relative paths: to the checkpoint's folder)
  nlohmann::json extra;   // anything else the trainer stored
  // Read: whether the file holds the optimizer state (it can resume a run). Ignored by
  // save_checkpoint, whose with_optimizer_state argument decides.
  bool optimizer_state = false;
};

// Writes the parameters of `model` (and with `with_optimizer_state` the master weights and
// Adam's moments) to `path`, atomically. The model shape is model.config(), not info.config.
void save_checkpoint(const std::string& path, const GPT& model, const CheckpointInfo& info,
                     bool with_optimizer_state = false);
// Reads and checks the metadata (and the whole file's checksum).
CheckpointInfo read_checkpoint_info(const std::string& path);
// True when `path` is a file whose header reads as a tide checkpoint (read_checkpoint_info).
bool is_checkpoint_file(const std::string& path);
// Loads the weights (and with `with_optimizer_state` the optimizer state, which the file must
// hold) into `model`, whose shape must be the checkpoint's.
void load_checkpoint(const std::string& path, GPT& model, bool with_optimizer_state = false);

// The same on a bare chunk store whose layout is make_layout(config): what the GPT
// versions call, and the way to save or load a store of another compute dtype. A store with
// chunks in a device's memory is saved through `copies`, a context on that device (the model's
// op()), one tensor at a time: the host never holds the states whole (tensor_to_write.h).
void save_checkpoint(const std::string& path, const ChunkStore& store, const CheckpointInfo& info,
                     bool with_optimizer_state = false, const OpContext* copies = nullptr);
void load_checkpoint(const std::string& path, ChunkStore& store, const GPTConfig& config,
                     bool with_optimizer_state = false);

}  // namespace tide
