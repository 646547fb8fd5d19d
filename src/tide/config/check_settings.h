#pragma once
// Why: a rule between keys (offload needs ZeRO, auto placement needs a budget, the model shape
// against tensor and pipeline parallelism, ...) is written once, here, and checked for every
// command that reads a config: load_train_config calls it last, so `tide train` and
// `tide estimate --config` refuse the same configs with the same messages, before anything is
// written. One key's own values are its table entry's (config_schema). What depends on the ranks
// launched, and what tide estimate sizes but tide train cannot run yet, is
// check_trainer_can_honour's (unsupported_settings.h).

#include "tide/config/config.h"

namespace tide {

// Throws a tide::Error for the first rule between keys that `c` breaks, naming the keys and
// the fix. `c` is resolved (the batch derived, a preset's shape, the schedule's defaults).
void check_settings(const TrainConfig& c);

// The ranks `world` against the layout: every data-parallel replica holds tensor_parallel.size
// x pipeline.stages ranks. For the world tide estimate sizes (setup_from_train_config: the
// world_size key, 0 being 1 rank there); tide train checks the ranks it was launched on
// instead, with the launch as the fix (check_trainer_can_honour, unsupported_settings.h).
void check_world_layout(const TrainConfig& c, int world);

}  // namespace tide
