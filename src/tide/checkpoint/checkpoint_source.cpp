#include "tide/checkpoint/checkpoint_source.h"

#include "tide/checkpoint/checkpoint_meta.h"
#include "tide/checkpoint/safetensors.h"
#include "tide/checkpoint/sharded_checkpoint.h"

namespace tide {

struct CheckpointSource::Impl {
  std::string path;
  std::unique_ptr<ShardedCheckpointReader> dir;  // a sharded directory, or
  std::unique_ptr<SafetensorsReader> file;       // a single file
  CheckpointInfo info;
  DType compute = DType::F32;
};

CheckpointSource::CheckpointSource(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  if (is_sharded_checkpoint(path)) {
    impl_->dir = std::make_unique<ShardedCheckpointReader>(path, /*verify_data=*/true,
                                                           /*open_all=*/false);
    impl_->info = impl_->dir->info().info;
    impl_->compute = impl_->dir->info().compute_dtype;
    return;
  }
  impl_->file = std::make_unique<SafetensorsReader>(path, "checkpoint");
  impl_->info =
      checkpoint_info_from_meta(impl_->file->metadata(), fmt::format("checkpoint '{}'", path));
  // The parameters' dtype: every model has wte.
  if (impl_->file->contains("wte")) impl_->compute = impl_->file->entry("wte").dtype;
}

CheckpointSource::~CheckpointSource() = default;

const std::string& CheckpointSource::path() const {
  return impl_->path;
}

const CheckpointInfo& CheckpointSource::info() const {
  return impl_->info;
}

DType CheckpointSource::compute_dtype() const {
  return impl_->compute;
}

bool CheckpointSource::contains(const std::string& name) const {
  return impl_->dir ? impl_->dir->contains(name) : impl_->file->contains(name);
}

DType CheckpointSource::dtype(const std::string& name) const {
  return impl_->dir ? impl_->dir->dtype(name) : impl_->file->entry(name).dtype;
}

int64_t CheckpointSource::numel(const std::string& name) const {
  return impl_->dir ? impl_->dir->numel(name) : impl_->file->entry(name).shape.numel();
}

void CheckpointSource::prepare(const std::string& name, int64_t begin, int64_t end) const {
  if (impl_->dir) impl_->dir->prepare(name, begin, end);
}

void CheckpointSource::read(const std::string& name, int64_t begin, int64_t end, void* dst) const {
  if (impl_->dir) return impl_->dir->read(name, begin, end, dst);
  const SafetensorsEntry& e = impl_->file->entry(name);
  const uint64_t esz = dtype_size(e.dtype);
  TIDE_CHECK(0 <= begin && begin <= end && end <= e.shape.numel(),
             "checkpoint '{}': elements [{}, {}) are outside tensor '{}' ({} elements)",
             impl_->path, begin, end, name, e.shape.numel());
  impl_->file->read_bytes(name, static_cast<uint64_t>(begin) * esz,
                          static_cast<uint64_t>(end - begin) * esz, dst);
}

}  // namespace tide
