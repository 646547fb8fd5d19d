#pragma once
// Why: `tide estimate` must read its settings exactly as `tide train` does (a --config file,
// its flags as key overrides, key=value), so it parses them with the trainer's parser (one
// schema: unknown keys, types, ranges and the rules between keys are the same errors for both
// commands) and derives the memory model's TrainSetup from the typed config, its only way in.

#include <string>

#include "tide/config/config.h"
#include "tide/estimate/train_setup.h"

namespace tide {

// The setup `tide estimate` sizes for config `c`: every field from its key (table in
// docs/estimate.md). world_size 0 ("as launched") is 1; precision is bf16 if bf16.enabled,
// fp16 if fp16.enabled, else fp32 (as in DeepSpeed and tide train); model.vocab_size 0 ("the
// data's tokenizer") is read from data.dir's meta.json when there is one, else left 0. The
// config's own checks hold (load_train_config ran them); the world it sizes must hold the
// layout (check_world_layout, check_settings.h), else a tide::Error.
TrainSetup setup_from_train_config(const TrainConfig& c);

// Reads the config file as `tide train` does (load_train_config), except that paths need not
// exist: an estimate reads no data, and may be made for a cluster's config on a laptop.
TrainSetup read_estimate_config(const std::string& path);

}  // namespace tide
