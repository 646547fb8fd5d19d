#pragma once
// Reads a TrainSetup from the trainer's JSON config (DeepSpeed key names where they exist).
// Only these keys are read; any other key is left to the trainer and ignored here:
//   train_micro_batch_size_per_gpu, gradient_accumulation_steps,
//   zero_optimization.stage, zero_optimization.offload_optimizer.device ("cpu" | "none"),
//   zero_optimization.offload_param.device ("cpu" | "none"), bf16.enabled, fp16.enabled,
//   optimizer.type ("AdamW" | "Adam" | "SGD"),
//   model.{preset, n_layer, n_head, n_embd, vocab_size, max_seq_len}, seq_len,
//   parallel.{tp, pp, sp}, activation_checkpointing.policy ("none" | "selective" | "full"),
//   pipeline.schedule, pipeline.virtual_stages, chunk_size_mb, world_size
// Precision follows DeepSpeed: bf16 if bf16.enabled, fp16 if fp16.enabled, fp32 otherwise.
// Model, batch and chunk keys have tide train's names and meanings (train/config.cpp): seq_len
// is the training sequence length, model.max_seq_len absent or 0 means seq_len (without a
// preset), chunk_size_mb is a number of MiB of f32 elements.

#include <nlohmann/json.hpp>
#include <string>

#include "tide/estimate/train_setup.h"

namespace tide {

// Keys present in `config` override the fields of `base`. A key of the wrong type is an error
// naming the key and the expected type.
TrainSetup setup_from_json(const nlohmann::json& config, TrainSetup base = {});

// Reads and parses the file; errors name the file.
TrainSetup read_setup_file(const std::string& path, TrainSetup base = {});

}  // namespace tide
