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

// init_from's sources: a tide checkpoint (a single file or a sharded directory) or a Hugging
// Face model folder (config.json + model.safetensors or a sharded index, as `tide import` reads
// it). True for the latter: a directory with config.json that is not a sharded checkpoint.
bool is_hf_model_folder(const std::string& path);

// The model `path` holds, read cheaply (a checkpoint's header or index, a folder's config.json;
// the weights are checked when they are loaded): where `tide train` and `tide estimate` take
// the model.* keys a config with init_from leaves out. Its dropout is the config's business
// (a training setting, not part of the shape): 0 here.
GPTConfig init_from_model(const std::string& path);

// init_from's source as a tide checkpoint for the loaders below: a checkpoint is itself; a
// Hugging Face folder is imported (as `tide import` does, everything checked) into a single
// file in a fresh temporary directory, removed again with this object. Why a file: every
// loader (ZeRO slices, tensor-parallel shards, pipeline stages, 16-bit runs) reads checkpoints,
// so the folder is read by the importer alone. It costs a f32 copy of the model on disk and in
// memory while it is imported, on each rank: for large models `tide import` once instead.
class InitFromCheckpoint {
 public:
  explicit InitFromCheckpoint(const std::string& path);
  ~InitFromCheckpoint();
  InitFromCheckpoint(const InitFromCheckpoint&) = delete;
  InitFromCheckpoint& operator=(const InitFromCheckpoint&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_, temp_dir_;
};

// Checks that `path` (a checkpoint file or sharded directory) holds a model of `config`'s shape
// (and, for a file, its checksum); throws a tide::Error naming both shapes otherwise.
void check_init_from(const std::string& path, const GPTConfig& config);

// Overwrites the parameters `model` holds (all, or this rank's slice) with the checkpoint's
// (its master weights when it has them, else its parameters, widened to f32); a 16-bit model's
// master weights get those values and its parameters them rounded. A sharded checkpoint
// initialises f32 models only. Everything is checked first. A device model's chunks are
// written through its context (GPT::op()), one tensor at a time.
void init_weights_from(const std::string& path, GPT& model);

}  // namespace tide
