#include "tide/train/tp_checkpoint.h"

#include <cstring>
#include <vector>

#include "tide/core/error.h"

namespace tide {

namespace {

// The kinds a checkpoint holds (f32 compute: no master copy).
std::vector<ChunkKind> saved_kinds(bool with_optimizer_state) {
  if (!with_optimizer_state) return {ChunkKind::PARAM};
  return {ChunkKind::PARAM, ChunkKind::ADAM_M, ChunkKind::ADAM_V};
}

void check_store(const GPT& model, bool with_optimizer_state, const char* what) {
  const ChunkStore& s = model.store();
  TIDE_CHECK(s.compute_dtype() == DType::F32,
             "{} a tensor-parallel checkpoint: the compute dtype is {}, and only f32 is "
             "supported (tensor parallelism runs f32 on the host)",
             what, dtype_name(s.compute_dtype()));
  for (ChunkKind k : saved_kinds(with_optimizer_state)) {
    TIDE_CHECK(s.has(k),
               "{} the optimizer state of a tensor-parallel checkpoint: the model was "
               "built without one",
               what);
    TIDE_CHECK(!s.sliced(k) || s.layout().group_size() == 1,
               "{} a tensor-parallel checkpoint from a ZeRO-sliced store (stages 1-3) is not "
               "supported yet; use ZeRO stage 0 with tensor parallelism for runs that save",
               what);
  }
}

// The unsharded (t = 1) model's store of `config`, with the kinds a checkpoint holds.
std::unique_ptr<ChunkStore> whole_store(const GPTConfig& config, const GPT& model,
                                        bool with_optimizer_state) {
  ChunkLayout layout = make_layout(
      config, RankCoords{.tp = 1, .tp_rank = 0, .pp = model.pp(), .stage = model.stage()});
  layout.pack(0, 1);
  StoreOptions o;
  o.with_optimizer = with_optimizer_state;
  return std::make_unique<ChunkStore>(std::move(layout), o);
}

}  // namespace

std::unique_ptr<ChunkStore> gather_tp_shards(const GPT& model, bool with_optimizer_state) {
  ProcessGroup* tp = model.tp_group();
  TIDE_CHECK(tp != nullptr, "gather_tp_shards: the model has no tensor-parallel group");
  check_store(model, with_optimizer_state, "cannot save");
  const GPTConfig& cfg = model.config();
  const ChunkStore& shard = model.store();
  const ChunkLayout& lay = shard.layout();
  const bool root = tp->rank() == 0;
  std::unique_ptr<ChunkStore> whole;
  if (root) whole = whole_store(cfg, model, with_optimizer_state);
  std::vector<float> all;
  for (ChunkKind k : saved_kinds(with_optimizer_state))
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const std::string& name = lay.slot(id).name;
      const Tensor mine = shard.tensor(k, id);  // every tp rank's shard has this shape
      const int64_t n = mine.numel();
      all.resize(static_cast<size_t>(n * tp->size()));
      tp->all_gather(Tensor(mine.data, Shape{n}), Tensor(all.data(), Shape{n * tp->size()}));
      if (!root) continue;
      const Tensor dst = whole->tensor(k, whole->layout().find(name));
      const int ranks = tp_sharded(name) ? tp->size() : 1;  // replicated: rank 0's copy
      for (int r = 0; r < ranks; ++r) {
        const RankCoords at{
            .tp = tp->size(), .tp_rank = r, .pp = model.pp(), .stage = model.stage()};
        for (int64_t i = 0; i < n; ++i) {
          const int64_t g = tp_global_index(cfg, at, name, i);
          if (g >= 0) dst.f32()[g] = all[r * n + i];
        }
      }
    }
  return whole;
}

void save_checkpoint_tp(const std::string& path, const GPT& model, const CheckpointInfo& info,
                        bool with_optimizer_state) {
  ProcessGroup* tp = model.tp_group();
  if (!tp || tp->size() == 1) return save_checkpoint(path, model, info, with_optimizer_state);
  const std::unique_ptr<ChunkStore> whole = gather_tp_shards(model, with_optimizer_state);
  if (!whole) return;  // not tp rank 0
  CheckpointInfo with_shape = info;
  with_shape.config = model.config();
  save_checkpoint(path, *whole, with_shape, with_optimizer_state);
}

std::unique_ptr<ChunkStore> unsharded_store(const GPT& model, bool with_optimizer_state) {
  check_store(model, with_optimizer_state, "cannot load");
  return whole_store(model.config(), model, with_optimizer_state);
}

void load_checkpoint_tp(const std::string& path, GPT& model, bool with_optimizer_state) {
  ProcessGroup* tp = model.tp_group();
  if (!tp || tp->size() == 1) return load_checkpoint(path, model, with_optimizer_state);
  const std::unique_ptr<ChunkStore> whole = unsharded_store(model, with_optimizer_state);
  load_checkpoint(path, *whole, model.config(),
                  with_optimizer_state);  // every check, nothing copied yet
  scatter_to_tp_shard(*whole, model, with_optimizer_state);
}

void scatter_to_tp_shard(const ChunkStore& whole, GPT& model, bool with_optimizer_state) {
  const GPTConfig& cfg = model.config();
  ChunkStore& shard = model.store();
  const ChunkLayout& lay = shard.layout();
  for (ChunkKind k : saved_kinds(with_optimizer_state))
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const std::string& name = lay.slot(id).name;
      const Tensor dst = shard.tensor(k, id);
      const Tensor src = whole.tensor(k, whole.layout().find(name));
      for (int64_t i = 0; i < dst.numel(); ++i) {
        const int64_t g = tp_global_index(cfg, model.coords(), name, i);
        dst.f32()[i] = g < 0 ? 0.0f : src.f32()[g];
      }
    }
}

}  // namespace tide
