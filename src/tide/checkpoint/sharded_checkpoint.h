#pragma once
// Sharded checkpoints: a directory in which every rank of a data-parallel group of N wrote the
// elements it owns (ZeRO), readable by a group of any other size M. Why: under ZeRO no rank
// holds the whole optimizer state (or, at stage 3, the whole model), so one rank cannot write
// a single file without gathering everything; and a run must be able to resume on a different
// number of ranks (4 -> 2, 2 -> 3, 3 -> 1).
//
//   <dir>/index.json                         which piece of which tensor is in which file
//   <dir>/shard-00000-of-00004.safetensors   rank 0's pieces (safetensors.h: checksummed)
//   ...
//   <dir>/shard-00003-of-00004.safetensors
//
// Rank r's shard holds, for every tensor the checkpoint saves ("<name>", and with the
// optimizer state "master.<name>" when the compute dtype is not f32, "adam_m.<name>",
// "adam_v.<name>"; the names of checkpoint.h), the elements of the flattened tensor that fall
// in rank r's slices of the chunk layout (ChunkLayout::slice_elems): one contiguous 1-D piece
// per tensor, stored under the tensor's own name, with its element range [begin, end) in the
// shard's metadata. Every element of every tensor is in exactly one shard.
//
// index.json (Hugging Face's model.safetensors.index.json, with pieces instead of whole
// tensors):
//   {"metadata": {"format": "tide-sharded", "version": 1, "world_size": N, "model": {...},
//                 "step", "tokenizer", "extra", "optimizer_state", "compute_dtype": "F32",
//                 "total_size": <bytes of tensor data>},
//    "files": {"shard-00000-of-00004.safetensors": {"checksum": "<16 hex>", "bytes": n}, ...},
//    "weight_map": {"wte": [{"file": "shard-00000-of-00004.safetensors", "key": "wte",
//                            "begin": 0, "end": 12288}, ...], ...}}
// Readers trust nothing in it: the pieces must tile every tensor of the model exactly, and each
// piece, the model shape, step and dtype must agree with the shard files' own checksummed
// metadata; the file checksums bind the index to the shards of the same save.
//
// Writing (every rank, then one): save_checkpoint_shard on each rank writes its file into
// "<dir>.partial/"; after a barrier, commit_sharded_checkpoint on one rank writes the index
// there and swaps the directory into place atomically. Nothing is copied: each piece is written
// straight from the store's chunks, so a save needs no memory beyond the store.
//
// Reading: load_checkpoint_shard fills whatever a store holds (whole kinds whole, sliced kinds
// the store's own slice, for any group size), opening only the shard files that overlap it and
// reading only the overlapping bytes; every opened file's checksum and every piece is checked
// before the first byte is copied into the store, so a refused load leaves it as it was.

#include <memory>
#include <string>
#include <vector>

#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/checkpoint_source.h"
#include "tide/memory/chunk_store.h"

namespace tide {

// "shard-00002-of-00004.safetensors": the file of rank `rank` of `world`.
std::string shard_file_name(int rank, int world);

// True when `path` is a directory holding an index.json (a sharded checkpoint); false for a
// file, a missing path or any other directory. Loaders use it to say "this is a sharded
// checkpoint, not a file" (and the reverse) instead of a confusing parse error.
bool is_sharded_checkpoint(const std::string& path);

// Puts `fresh` (a file or a folder) at `target`, atomically exchanged with whatever is there
// (a checkpoint of either kind: a run resumed on another layout saves the other kind), which
// is then removed; errors start with `subject`.
void swap_into_place(const std::string& fresh, const std::string& target,
                     const std::string& subject);

// True when `path` is the "<dir>.partial" folder of a sharded save: save_checkpoint_shard
// writes there, and only commit_sharded_checkpoint, once every shard is written, makes it the
// checkpoint <dir>. One found on disk is a save that never completed (a rank died, the job was
// killed) or was caught mid-commit; tide never loads one.
bool is_uncommitted_checkpoint(const std::string& path);

// The one explanation of such a folder, for every command handed one (tide train's
// checkpoint.resume and init_from, tide sample, tide export): what it is, and the committed
// checkpoint to name instead ("<dir>" when it exists).
std::string uncommitted_checkpoint_message(const std::string& path);

// What a sharded checkpoint holds, beyond the CheckpointInfo of a single file.
struct ShardedCheckpointInfo {
  CheckpointInfo info;  // info.optimizer_state: the shards hold the optimizer state
  int world_size = 0;   // N, the data-parallel degree it was written at
  DType compute_dtype = DType::F32;
  uint64_t total_bytes = 0;  // tensor data in all shards
};

// Writes rank `rank`'s shard of `store` to "<dir>.partial/shard-<rank>-of-<world>.safetensors"
// (creating the folder). `world` must be the group size the store's layout was packed for;
// a kind the store holds sliced must be rank `rank`'s slice (options().group_rank == rank); a
// kind held whole contributes only rank `rank`'s slices, so the N shards never overlap. The
// model shape is info.config (it must match the store's layout). Every chunk written must be
// resident in host memory.
void save_checkpoint_shard(const std::string& dir, const ChunkStore& store,
                           const CheckpointInfo& info, bool with_optimizer_state, int rank,
                           int world);

// Pipeline parallelism: rank `rank` of a pipeline of `world` stages writes every tensor its
// stage's stores (one per model chunk, each holding its tensors whole) hold, whole, to
// "<dir>.partial/shard-<rank>-of-<world>.safetensors": the stages' tensors are disjoint, so the
// shards tile the model and commit_sharded_checkpoint, load_checkpoint_shard (any store: a whole
// model, ZeRO slices, another pipeline split), tide sample and tide export read it as any
// sharded checkpoint. The last stage's lm_head.weight (the tied wte's copy, equal to it with its
// Adam state) is not written: loading a stage that holds it reads wte.
// With data parallelism inside the stages (`dp` replicas, this one `dp_rank`; the stores'
// layouts packed for dp), each replica writes the part of each tensor in its slices of the
// chunks (ZeRO-1's optimizer-state slice, and that part of the whole parameters), to file
// rank * dp + dp_rank of world * dp: commit_sharded_checkpoint(dir, world * dp). A store with
// chunks in a device's memory is saved through `copies` as save_checkpoint saves it.
void save_pipeline_stage_shard(const std::string& dir, const std::vector<const ChunkStore*>& stores,
                               const CheckpointInfo& info, bool with_optimizer_state, int rank,
                               int world, int dp_rank = 0, int dp = 1,
                               const OpContext* copies = nullptr);

// After every rank's save_checkpoint_shard returned: checks that "<dir>.partial/" holds the
// `world` shards of one save (their headers; the data is not read again), writes index.json
// into it and swaps it into place as `dir` (an existing checkpoint at `dir` is replaced
// atomically and removed). Call it on one rank only.
void commit_sharded_checkpoint(const std::string& dir, int world);

// Reads and checks index.json and every shard's header against it; with `verify_data`, also
// every shard's checksum (this reads the whole checkpoint once, through a 4 MiB buffer).
ShardedCheckpointInfo read_sharded_checkpoint_info(const std::string& dir, bool verify_data = true);

// Loads what `store` owns (ChunkStore::owned) from any checkpoint, by tensor name and element
// range: the parameters, and with `with_optimizer_state` the master weights (compute dtype not
// f32) and Adam's moments, which the checkpoint must hold. `store`'s layout must be
// make_layout(config) packed for any group size M, its kinds whole or sliced, or a pipeline
// stage's (make_layout(config, {.pp, .stage}): lm_head.weight is read from wte); config must
// have the checkpoint's shape and the store its compute dtype. Everything is checked before
// anything is copied. (A tensor-parallel shard: tp_checkpoint.h, which loads the unsharded
// tensors through this and keeps its shard.) Chunks in a device's memory are written through
// `copies`, a context on that device (the model's op()), one tensor at a time.
void load_into_store(const CheckpointSource& source, ChunkStore& store, const GPTConfig& config,
                     bool with_optimizer_state = false, const OpContext* copies = nullptr);
// load_into_store from the sharded checkpoint `dir`.
void load_checkpoint_shard(const std::string& dir, ChunkStore& store, const GPTConfig& config,
                           bool with_optimizer_state = false);

// Random access to the tensors of a sharded checkpoint, for tools that consolidate it
// (`tide export`) and for loads (checkpoint_source.h). The constructor checks the index and,
// with `open_all`, every shard (headers and, with `verify_data`, checksums: the whole checkpoint
// is read once); without, each shard when first needed (prepare, read). Shards stay open.
class ShardedCheckpointReader {
 public:
  explicit ShardedCheckpointReader(const std::string& dir, bool verify_data = true,
                                   bool open_all = true);
  ~ShardedCheckpointReader();
  ShardedCheckpointReader(const ShardedCheckpointReader&) = delete;
  ShardedCheckpointReader& operator=(const ShardedCheckpointReader&) = delete;

  const ShardedCheckpointInfo& info() const;
  // Whether the checkpoint holds tensor `name` ("wte", "master.wte", "adam_m.wte", ...).
  bool contains(const std::string& name) const;
  // The stored dtype of tensor `name` (the compute dtype for parameters, else f32).
  DType dtype(const std::string& name) const;
  int64_t numel(const std::string& name) const;
  // Opens and checks every shard elements [begin, end) of `name` are in.
  void prepare(const std::string& name, int64_t begin, int64_t end) const;
  // Copies elements [begin, end) of the flattened tensor `name`, in its stored dtype.
  void read(const std::string& name, int64_t begin, int64_t end, void* dst) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tide
