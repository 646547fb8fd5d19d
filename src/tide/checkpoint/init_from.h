#pragma once
// init_from: a run's weights taken from a checkpoint (e.g. one `tide import` wrote from a
// Hugging Face model) instead of the random init, at step 0, without optimizer state.
//
// Why its own loader: load_checkpoint fills a whole store, but under ZeRO-3 a rank holds only
// its slice of the parameters, and a single-file checkpoint (what `tide import` writes) must
// start runs of any stage. So each rank reads, from a single file, exactly the elements its
// PARAM chunks hold (as init_weights draws them); a sharded directory goes through
// load_checkpoint_shard, which already handles sliced stores.

#include <string>

#include "tide/model/gpt.h"

namespace tide {

// Checks that `path` (a checkpoint file or sharded directory) holds a model of `config`'s shape
// (and, for a file, its checksum); throws a tide::Error naming both shapes otherwise.
void check_init_from(const std::string& path, const GPTConfig& config);

// Overwrites the parameters `model` holds (all, or this rank's slice) with the checkpoint's
// (its master weights when it has them, else its parameters, widened to f32); a 16-bit model's
// master weights get those values and its parameters them rounded. A sharded checkpoint
// initialises f32 models only. Everything is checked first.
void init_weights_from(const std::string& path, GPT& model);

}  // namespace tide
