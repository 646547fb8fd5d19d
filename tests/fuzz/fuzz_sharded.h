#pragma once
// The sharded checkpoint of the sharded_index target and its seeds (make_seeds): two ranks of
// the tiny model, bf16 compute with the optimizer state, chunks of 40 elements so that tensors
// straddle chunk and slice boundaries. Its bytes are the same in every process (no randomness,
// no time), so the seed index.json's checksums match the shards the fuzzer writes.
#include <algorithm>
#include <filesystem>
#include <memory>

#include "fuzz_util.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/memory/chunk_store.h"
#include "tide/model/layout.h"

namespace tide::fuzz {

inline constexpr int64_t kShardedChunkElems = 40;
inline constexpr ChunkKind kShardedKinds[] = {ChunkKind::PARAM, ChunkKind::MASTER,
                                              ChunkKind::ADAM_M, ChunkKind::ADAM_V};

// A store of the tiny model packed for `group` ranks, holding rank `rank`'s slices of the
// `sliced` kinds.
inline std::unique_ptr<ChunkStore> sharded_store(int group, int rank, unsigned sliced) {
  ChunkLayout lay = make_layout(tiny_model());
  lay.pack(kShardedChunkElems, group);
  StoreOptions o;
  o.compute_dtype = DType::BF16;
  o.group_rank = rank;
  o.sliced_kinds = sliced;
  return std::make_unique<ChunkStore>(std::move(lay), o);
}

// Calls f(kind, tensor id, lo, hi, held, element bytes) for each element range [lo, hi) of a
// tensor that `s` holds (the parameters; with_optimizer_state: every saved kind), `held`
// pointing at element lo.
template <class F>
void for_each_held(const ChunkStore& s, bool with_optimizer_state, F&& f) {
  for (ChunkKind k : kShardedKinds) {
    if (k != ChunkKind::PARAM && !with_optimizer_state) continue;
    for (int id = 0; id < s.layout().num_tensors(); ++id) {
      const TensorSlot& slot = s.layout().slot(id);
      const Chunk ch = s.owned(k, slot.chunk);
      const int64_t lo = std::max(slot.offset, ch.begin);
      const int64_t hi = std::min(slot.offset + slot.numel, ch.begin + ch.elems);
      if (lo >= hi) continue;
      const size_t es = dtype_size(ch.dtype);
      f(k, id, lo - slot.offset, hi - slot.offset,
        static_cast<char*>(ch.data) + (lo - ch.begin) * static_cast<int64_t>(es), es);
    }
  }
}

// Writes the checkpoint to `dir` (replacing it) and returns the whole store it holds.
inline std::unique_ptr<ChunkStore> save_tiny_sharded_checkpoint(const std::string& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir + ".partial");
  auto whole = sharded_store(1, 0, 0);
  uint32_t x = 12345;  // every element its own bytes (bf16 and f32 alike: any bit pattern)
  for_each_held(*whole, true, [&](ChunkKind, int, int64_t lo, int64_t hi, char* p, size_t es) {
    for (size_t i = 0; i < static_cast<size_t>(hi - lo) * es; ++i)
      p[i] = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  });
  CheckpointInfo info;
  info.config = tiny_model();
  info.step = 5;
  info.tokenizer = "tokenizer.json";
  info.extra = {{"note", "seed"}};
  const unsigned zero1 =
      kind_bit(ChunkKind::MASTER) | kind_bit(ChunkKind::ADAM_M) | kind_bit(ChunkKind::ADAM_V);
  for (int r = 0; r < 2; ++r) {  // ZeRO-1 ranks: the optimizer state sliced, the rest whole
    auto s = sharded_store(2, r, zero1);
    for_each_held(*s, true, [&](ChunkKind k, int id, int64_t lo, int64_t hi, char* p, size_t es) {
      const Tensor t = whole->tensor(k, id);
      std::copy_n(static_cast<const char*>(t.data) + lo * static_cast<int64_t>(es),
                  static_cast<size_t>(hi - lo) * es, p);
    });
    save_checkpoint_shard(dir, *s, info, /*with_optimizer_state=*/true, r, 2);
  }
  commit_sharded_checkpoint(dir, 2);
  return whole;
}

}  // namespace tide::fuzz
