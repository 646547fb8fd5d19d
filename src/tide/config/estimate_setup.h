#pragma once
// Why: `tide estimate --config FILE` must read a file exactly as `tide train` does, so it
// parses it with the trainer's parser (one schema: unknown keys, types and ranges are the same
// errors for both commands) and derives the memory model's TrainSetup from the typed config,
// instead of reading the JSON a second time by hand.

#include <string>

#include "tide/config/config.h"
#include "tide/estimate/train_setup.h"

namespace tide {

// The setup `tide estimate` sizes for config `c`: every field from its key (table in
// docs/estimate.md). world_size 0 ("as launched") is 1; precision is bf16 if bf16.enabled,
// fp16 if fp16.enabled, else fp32 (as in DeepSpeed and tide train); model.vocab_size 0 ("the
// data's tokenizer") is read from data.dir's meta.json when there is one, else left 0.
TrainSetup setup_from_train_config(const TrainConfig& c);

// Reads the config file as `tide train` does (load_train_config), except that paths need not
// exist: an estimate reads no data, and may be made for a cluster's config on a laptop.
TrainSetup read_estimate_config(const std::string& path);

}  // namespace tide
