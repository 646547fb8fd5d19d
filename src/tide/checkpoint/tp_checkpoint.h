#pragma once
// Checkpoints of a tensor-parallel model (Megatron-LM sharding, model/layout.h) in the ordinary
// single-file format (checkpoint.h) of the unsharded model. Why whole tensors: every reader
// (`tide sample`, `tide export`, init_from, a resume at any tp) reads whole tensors, so a
// tensor-parallel run writes what a single-rank run writes, and nothing downstream has to know
// about the column / row / vocabulary split.
//
// Saving is collective over the model's tp group: for each saved tensor (the parameters, and
// with the optimizer state Adam's moments) the ranks all-gather their shards and tp rank 0
// places every element at tp_global_index in the unsharded tensor (a replicated tensor is
// taken from rank 0, the vocabulary padding rows are dropped), then writes the file. Loading
// needs no communication: every rank reads the file and keeps the elements of its shard, so a
// resume at the same tp is bitwise and a load at a different tp (or none) works too.
//
// Memory: tp rank 0 holds the whole unsharded model (and moments) once while saving, every
// rank while loading. Data parallelism: at ZeRO stage 0 the dp replicas are equal, so one tp
// group can save (call it on the ranks of dp replica 0 only, dp = nullptr), or every rank
// calls it with its dp group and only (tp 0, dp 0) writes. A ZeRO-sliced store (stages 1-3,
// the kinds sliced over dp) needs the dp group: the owned slices are all-gathered over it
// first (collective over tp x dp), so the file is the same whole-model file; loading keeps
// each rank's own slices (no communication).

#include <memory>
#include <string>

#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/checkpoint_source.h"
#include "tide/model/gpt.h"

namespace tide {

// Collective over model.tp_group() (a plain save_checkpoint without one) and, when given, over
// `dp` (the group the store's chunks are sliced over; required for a ZeRO-sliced store).
// Only tp rank 0 (of dp rank 0 when dp is given) writes `path`; info.config is set from the
// model.
void save_checkpoint_tp(const std::string& path, const GPT& model, const CheckpointInfo& info,
                        bool with_optimizer_state, ProcessGroup* dp = nullptr);

// Loads any checkpoint (a single file or a sharded directory, checkpoint_source.h) into this
// rank's shards, or into the model's store without tp (the parameters, and with
// `with_optimizer_state` Adam's moments; of a ZeRO-sliced kind only this rank's slice). The
// checkpoint must have the model's shape; all of load_into_store's checks apply. Without tp a
// device model's chunks are written in place, a tensor at a time; with tp they must be in host
// memory (a host copy of the model: host_twin.h).
void load_checkpoint_any(const CheckpointSource& source, GPT& model, bool with_optimizer_state);
void load_checkpoint_tp(const std::string& path, GPT& model, bool with_optimizer_state);

// The two halves of the above, for the pipeline's stages (train/step_runner.h). gather_tp_shards:
// collective over model.tp_group() (and `dp` as in save_checkpoint_tp); on the writing rank a store
// of the model's unsharded layout (t = 1, the model's pp and stage, one rank) holding the gathered
// parameters (and Adam moments; a 16-bit model's f32 master weights too), nullptr on the others.
// unsharded_store: an empty such store, to load into (in the model's compute dtype with the
// optimizer state; in f32 without it, so that it reads a checkpoint's master weights);
// scatter_to_tp_shard then copies this rank's elements of it into the model's shards (of a
// ZeRO-sliced kind only this rank's slice; local, no communication), converting dtypes: f32
// parameters rounded into a 16-bit model's PARAM, and, without the optimizer state, also kept as
// its f32 MASTER (as init_weights_from sets them).
std::unique_ptr<ChunkStore> gather_tp_shards(const GPT& model, bool with_optimizer_state,
                                             ProcessGroup* dp = nullptr);
std::unique_ptr<ChunkStore> unsharded_store(const GPT& model, bool with_optimizer_state);
void scatter_to_tp_shard(const ChunkStore& whole, GPT& model, bool with_optimizer_state);

}  // namespace tide
