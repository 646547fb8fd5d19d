#pragma once
// A checkpoint seen as the whole model's tensors, whatever wrote it: a single file (ZeRO-0 and
// tensor-parallel runs, `tide import`) or a sharded directory (ZeRO 1-3 and pipeline runs,
// sharded_checkpoint.h). Loads read through it by tensor name and element range of the whole
// (unsharded) tensor, so any checkpoint loads into any layout: another dp degree, ZeRO stage,
// tensor-parallel size, pipeline stages or schedule, offload on or off (load_into_store in
// sharded_checkpoint.h; tp_checkpoint.h's shards and the pipeline's stages go through it).

#include <memory>
#include <string>

#include "tide/checkpoint/checkpoint.h"
#include "tide/core/dtype.h"

namespace tide {

class CheckpointSource {
 public:
  // Opens `path` and checks its header or index; a single file's checksum is verified here
  // (the whole file is read once), a sharded directory's shard files when prepare() first
  // needs them, so a rank reads only the shards that hold its elements.
  explicit CheckpointSource(const std::string& path);
  ~CheckpointSource();
  CheckpointSource(const CheckpointSource&) = delete;
  CheckpointSource& operator=(const CheckpointSource&) = delete;

  const std::string& path() const;
  const CheckpointInfo& info() const;
  DType compute_dtype() const;  // the stored parameters' dtype
  bool contains(const std::string& name) const;
  // Tensor `name`'s stored dtype and element count (it must exist: contains()).
  DType dtype(const std::string& name) const;
  int64_t numel(const std::string& name) const;
  // Opens and checks the files elements [begin, end) of `name` are in, so that a load can
  // check everything before it copies anything.
  void prepare(const std::string& name, int64_t begin, int64_t end) const;
  // Copies elements [begin, end) of the flattened tensor `name`, in its stored dtype.
  void read(const std::string& name, int64_t begin, int64_t end, void* dst) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tide
