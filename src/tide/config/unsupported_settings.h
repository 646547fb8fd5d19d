#pragma once
// Why: one config file serves `tide train` and `tide estimate`, so the schema holds settings
// that `tide estimate` sizes but the trainer cannot run yet (partitioned activations inside
// pipeline stages, SGD), and a layout or world size that must match the ranks launched. The
// trainer must never drop one silently: each is an error naming the key, the value and what tide
// supports today. (The rules between keys that hold for both commands are check_settings.h's,
// checked when the config is read.)

#include "tide/config/config.h"

namespace tide {

// Throws a tide::Error for the first setting of `c` that a Trainer on `world_size` ranks
// cannot honour; returns when it can run them all.
void check_trainer_can_honour(const TrainConfig& c, int world_size);

}  // namespace tide
