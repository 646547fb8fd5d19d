#include "tide/checkpoint/tp_checkpoint.h"

#include <cstring>
#include <vector>

#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/core/error.h"

namespace tide {

namespace {

// The kinds a checkpoint holds (f32 compute: no master copy).
std::vector<ChunkKind> saved_kinds(bool with_optimizer_state) {
  if (!with_optimizer_state) return {ChunkKind::PARAM};
  return {ChunkKind::PARAM, ChunkKind::ADAM_M, ChunkKind::ADAM_V};
}

void check_store(const GPT& model, bool with_optimizer_state, bool saving, ProcessGroup* dp,
                 const char* what) {
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
    // Saving gathers the slices over dp; loading keeps its own (dp = nullptr: no check).
    TIDE_CHECK(!saving || !s.sliced(k) || s.layout().group_size() == 1 ||
                   (dp && dp->size() == s.layout().group_size()),
               "{} a tensor-parallel checkpoint from a ZeRO-sliced store (stages 1-3) needs "
               "the data-parallel group the store is sliced over (pass it as `dp`)",
               what);
  }
}

bool any_sliced(const ChunkStore& s, bool with_optimizer_state) {
  if (s.layout().group_size() == 1) return false;
  for (ChunkKind k : saved_kinds(with_optimizer_state))
    if (s.sliced(k)) return true;
  return false;
}

// An unsliced store with the layout of `s` (this tp rank's shard) and the kinds a checkpoint
// holds, zero-filled.
std::unique_ptr<ChunkStore> unsliced_copy_of(const ChunkStore& s, bool with_optimizer_state) {
  StoreOptions o;
  o.with_optimizer = with_optimizer_state;
  return std::make_unique<ChunkStore>(ChunkLayout(s.layout()), o);
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

std::unique_ptr<ChunkStore> gather_tp_shards(const GPT& model, bool with_optimizer_state,
                                             ProcessGroup* dp) {
  ProcessGroup* tp = model.tp_group();
  TIDE_CHECK(tp != nullptr, "gather_tp_shards: the model has no tensor-parallel group");
  check_store(model, with_optimizer_state, true, dp, "cannot save");
  const GPTConfig& cfg = model.config();
  // ZeRO 1-3: every sliced kind's chunks all-gathered over dp first (each slice r of chunk c
  // is dp rank r's), so the tp ranks see their whole shards.
  std::unique_ptr<ChunkStore> gathered;
  if (any_sliced(model.store(), with_optimizer_state)) {
    const ChunkStore& s = model.store();
    gathered = unsliced_copy_of(s, with_optimizer_state);
    for (ChunkKind k : saved_kinds(with_optimizer_state))
      for (int c = 0; c < s.layout().num_chunks(); ++c) {
        const Tensor dst = gathered->chunk(k, c);
        if (s.sliced(k))
          dp->all_gather(s.slice(k, c), dst);
        else
          std::memcpy(dst.data, s.chunk(k, c).data, dst.nbytes());
      }
  }
  const ChunkStore& shard = gathered ? *gathered : model.store();
  const ChunkLayout& lay = shard.layout();
  const bool root = tp->rank() == 0 && (!dp || dp->rank() == 0);
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
                        bool with_optimizer_state, ProcessGroup* dp) {
  ProcessGroup* tp = model.tp_group();
  if (!tp || tp->size() == 1) return save_checkpoint(path, model, info, with_optimizer_state);
  const std::unique_ptr<ChunkStore> whole = gather_tp_shards(model, with_optimizer_state, dp);
  if (!whole) return;  // not the writing rank
  CheckpointInfo with_shape = info;
  with_shape.config = model.config();
  save_checkpoint(path, *whole, with_shape, with_optimizer_state);
}

std::unique_ptr<ChunkStore> unsharded_store(const GPT& model, bool with_optimizer_state) {
  check_store(model, with_optimizer_state, false, nullptr, "cannot load");
  return whole_store(model.config(), model, with_optimizer_state);
}

void load_checkpoint_any(const CheckpointSource& source, GPT& model, bool with_optimizer_state) {
  ProcessGroup* tp = model.tp_group();
  if (!tp || tp->size() == 1)
    return load_into_store(source, model.store(), model.config(), with_optimizer_state);
  const std::unique_ptr<ChunkStore> whole = unsharded_store(model, with_optimizer_state);
  load_into_store(source, *whole, model.config(), with_optimizer_state);
  scatter_to_tp_shard(*whole, model, with_optimizer_state);
}

void load_checkpoint_tp(const std::string& path, GPT& model, bool with_optimizer_state) {
  load_checkpoint_any(CheckpointSource(path), model, with_optimizer_state);
}

void scatter_to_tp_shard(const ChunkStore& whole, GPT& model, bool with_optimizer_state) {
  const GPTConfig& cfg = model.config();
  ChunkStore& store = model.store();
  // ZeRO 1-3: the whole shard is built first, then each sliced chunk keeps its own slice.
  const bool sliced = any_sliced(store, with_optimizer_state);
  const std::unique_ptr<ChunkStore> local =
      sliced ? unsliced_copy_of(store, with_optimizer_state) : nullptr;
  ChunkStore& shard = sliced ? *local : store;
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
  if (!sliced) return;
  const int r = store.options().group_rank;
  for (ChunkKind k : saved_kinds(with_optimizer_state))
    for (int c = 0; c < lay.num_chunks(); ++c) {
      const Tensor from = local->chunk(k, c);
      const Tensor to = store.sliced(k) ? store.slice(k, c) : store.chunk(k, c);
      const int64_t begin = store.sliced(k) ? r * lay.slice_elems(c) : 0;
      std::memcpy(to.data, from.f32() + begin, to.nbytes());
    }
}

}  // namespace tide
