#include "tide/checkpoint/tp_checkpoint.h"

#include <cstring>
#include <vector>

#include "tide/checkpoint/checkpoint_meta.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/core/error.h"

namespace tide {

namespace {

// The kinds a checkpoint of `s` holds (checkpoint_meta.h's checkpoint_kinds).
std::vector<ChunkKind> saved_kinds(const ChunkStore& s, bool with_optimizer_state) {
  std::vector<ChunkKind> kinds;
  for (const CheckpointKind& k : checkpoint_kinds(s.compute_dtype(), with_optimizer_state))
    kinds.push_back(k.kind);
  return kinds;
}

void check_store(const GPT& model, bool with_optimizer_state, bool saving, ProcessGroup* dp,
                 const char* what) {
  const ChunkStore& s = model.store();
  for (ChunkKind k : saved_kinds(s, with_optimizer_state)) {
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

// Whether `s` holds any of `kinds` only as its dp slice (ZeRO 1-3 over 2 or more ranks).
bool any_sliced(const ChunkStore& s, const std::vector<ChunkKind>& kinds) {
  if (s.layout().group_size() == 1) return false;
  for (ChunkKind k : kinds)
    if (s.sliced(k)) return true;
  return false;
}

// A store of `layout` holding the kinds a checkpoint holds, in `compute` (PARAM; MASTER and
// Adam f32), zero-filled.
std::unique_ptr<ChunkStore> plain_store(ChunkLayout layout, DType compute,
                                        bool with_optimizer_state) {
  StoreOptions o;
  o.compute_dtype = compute;
  o.with_optimizer = with_optimizer_state;
  return std::make_unique<ChunkStore>(std::move(layout), o);
}

// An unsliced store with the layout of `s` (this tp rank's shard), its compute dtype and the
// kinds a checkpoint holds.
std::unique_ptr<ChunkStore> unsliced_copy_of(const ChunkStore& s, bool with_optimizer_state) {
  return plain_store(ChunkLayout(s.layout()), s.compute_dtype(), with_optimizer_state);
}

// The unsharded (t = 1) model's store of `config` in `compute`, with the kinds a checkpoint
// holds.
std::unique_ptr<ChunkStore> whole_store(const GPTConfig& config, const GPT& model, DType compute,
                                        bool with_optimizer_state) {
  ChunkLayout layout = make_layout(
      config, RankCoords{.tp = 1, .tp_rank = 0, .pp = model.pp(), .stage = model.stage()});
  layout.pack(0, 1);
  return plain_store(std::move(layout), compute, with_optimizer_state);
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
  if (any_sliced(model.store(), saved_kinds(model.store(), with_optimizer_state))) {
    const ChunkStore& s = model.store();
    gathered = unsliced_copy_of(s, with_optimizer_state);
    for (ChunkKind k : saved_kinds(s, with_optimizer_state))
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
  if (root) whole = whole_store(cfg, model, shard.compute_dtype(), with_optimizer_state);
  std::vector<std::byte> all;  // every tp rank's shard of one tensor, in its dtype
  for (ChunkKind k : saved_kinds(shard, with_optimizer_state))
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const std::string& name = lay.slot(id).name;
      const Tensor mine = shard.tensor(k, id);  // every tp rank's shard has this shape
      const int64_t n = mine.numel();
      const size_t es = dtype_size(mine.dtype);
      all.resize(static_cast<size_t>(n * tp->size()) * es);
      tp->all_gather(Tensor(mine.data, Shape{n}, mine.dtype),
                     Tensor(all.data(), Shape{n * tp->size()}, mine.dtype));
      if (!root) continue;
      const Tensor dst = whole->tensor(k, whole->layout().find(name));
      TIDE_ASSERT(dst.dtype == mine.dtype);
      auto* out = static_cast<std::byte*>(dst.data);
      const int ranks = tp_sharded(name) ? tp->size() : 1;  // replicated: rank 0's copy
      for (int r = 0; r < ranks; ++r) {
        const RankCoords at{
            .tp = tp->size(), .tp_rank = r, .pp = model.pp(), .stage = model.stage()};
        for (int64_t i = 0; i < n; ++i) {
          const int64_t g = tp_global_index(cfg, at, name, i);
          if (g >= 0) std::memcpy(out + g * es, all.data() + (r * n + i) * es, es);
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
  // Without the optimizer state (init_from, sampling) the whole model is read in f32, as a run
  // without tp reads it (the master weights where the checkpoint has them, else its parameters
  // widened); scatter_to_tp_shard rounds them into a 16-bit model's parameters.
  const DType compute = with_optimizer_state ? model.store().compute_dtype() : DType::F32;
  return whole_store(model.config(), model, compute, with_optimizer_state);
}

void load_checkpoint_any(const CheckpointSource& source, GPT& model, bool with_optimizer_state) {
  ProcessGroup* tp = model.tp_group();
  if (!tp || tp->size() == 1)
    return load_into_store(source, model.store(), model.config(), with_optimizer_state,
                           &model.op());
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
  // The kinds written, and where each comes from: the same kind of `whole`, except that a
  // 16-bit model's own f32 master weights are set without the optimizer state too (from
  // whole's parameters, as init_weights_from sets them: PARAM is then MASTER rounded).
  std::vector<ChunkKind> kinds = saved_kinds(store, with_optimizer_state);
  const bool own_master = store.has(ChunkKind::MASTER) && store.compute_dtype() != DType::F32;
  if (!with_optimizer_state && own_master) kinds.push_back(ChunkKind::MASTER);
  auto source_kind = [&](ChunkKind k) { return whole.has(k) ? k : ChunkKind::PARAM; };
  // ZeRO 1-3: the whole shard is built first, then each sliced chunk keeps its own slice.
  const bool sliced = any_sliced(store, kinds);
  // (A 16-bit model's master weights need a store with the optimizer's kinds.)
  const std::unique_ptr<ChunkStore> local =
      sliced ? unsliced_copy_of(store, with_optimizer_state || own_master) : nullptr;
  ChunkStore& shard = sliced ? *local : store;
  const ChunkLayout& lay = shard.layout();
  std::vector<std::byte> picked;  // this shard's elements of one tensor, in whole's dtype
  for (ChunkKind k : kinds)
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const std::string& name = lay.slot(id).name;
      const Tensor dst = shard.tensor(k, id);
      const Tensor src = whole.tensor(source_kind(k), whole.layout().find(name));
      const size_t es = dtype_size(src.dtype);
      picked.assign(static_cast<size_t>(dst.numel()) * es, std::byte{0});  // padding rows: 0
      const auto* from = static_cast<const std::byte*>(src.data);
      for (int64_t i = 0; i < dst.numel(); ++i) {
        const int64_t g = tp_global_index(cfg, model.coords(), name, i);
        if (g >= 0) std::memcpy(picked.data() + i * es, from + g * es, es);
      }
      // Rounded once when the dtypes differ (f32 into 16-bit parameters), else copied.
      convert_elements(picked.data(), src.dtype, dst.data, dst.dtype, dst.numel());
    }
  if (!sliced) return;
  const int r = store.options().group_rank;
  for (ChunkKind k : kinds)
    for (int c = 0; c < lay.num_chunks(); ++c) {
      const Tensor from = local->chunk(k, c);
      const Tensor to = store.sliced(k) ? store.slice(k, c) : store.chunk(k, c);
      const int64_t begin = store.sliced(k) ? r * lay.slice_elems(c) : 0;
      std::memcpy(to.data,
                  static_cast<const std::byte*>(from.data) + begin * dtype_size(from.dtype),
                  to.nbytes());
    }
}

}  // namespace tide
