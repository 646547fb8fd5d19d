// Fuzzes the index.json of a sharded checkpoint. Once per process, two ranks of a tiny model
// save a valid sharded checkpoint into a scratch directory (fuzz_sharded.h); each input
// replaces its index.json, and the checkpoint is read (read_sharded_checkpoint_info) and loaded
// into a whole store (the parameters, then with the optimizer state) and into rank 1 of 3's
// ZeRO-3 slices (another group size). The shards stay valid and the index cannot change them,
// so whatever is accepted must be what was saved: the info the shards hold, the bytes saved.
#include <cstring>
#include <filesystem>

#include "fuzz_sharded.h"
#include "tide/checkpoint/checkpoint_meta.h"

namespace {

using namespace tide;

struct Fixture {
  std::string dir = fuzz::scratch_path("sharded_index");
  std::unique_ptr<ChunkStore> saved = fuzz::save_tiny_sharded_checkpoint(dir);
  std::unique_ptr<ChunkStore> whole = fuzz::sharded_store(1, 0, 0);
  std::unique_ptr<ChunkStore> sliced =
      fuzz::sharded_store(3, 1,
                          kind_bit(ChunkKind::PARAM) | kind_bit(ChunkKind::MASTER) |
                              kind_bit(ChunkKind::ADAM_M) | kind_bit(ChunkKind::ADAM_V));
  ~Fixture() { std::filesystem::remove_all(dir); }
};

// After an accepted load, every element `s` holds must be the saved one.
void check_loaded(const ChunkStore& s, const ChunkStore& saved, bool with_optimizer_state) {
  fuzz::for_each_held(s, with_optimizer_state,
                      [&](ChunkKind k, int id, int64_t lo, int64_t hi, char* p, size_t es) {
                        const char* want =
                            static_cast<const char*>(saved.tensor(k, id).data) + lo * int64_t(es);
                        if (std::memcmp(p, want, static_cast<size_t>(hi - lo) * es) != 0)
                          std::abort();  // accepted, but loaded other bytes than the checkpoint's
                      });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fx;
  fuzz::write_file(fx.dir + "/index.json",
                   std::string_view(reinterpret_cast<const char*>(data), size));
  const GPTConfig c = fuzz::tiny_model();
  ShardedCheckpointInfo x;
  if (fuzz::accepts([&] { x = read_sharded_checkpoint_info(fx.dir); })) {
    (void)x.info.config.str();
    if (!same_model_shape(x.info.config, c) || x.world_size != 2 || x.info.step != 5 ||
        x.compute_dtype != DType::BF16 || !x.info.optimizer_state)
      std::abort();  // accepted an index that disagrees with its shards
  }
  if (fuzz::accepts([&] { load_checkpoint_shard(fx.dir, *fx.whole, c); }))
    check_loaded(*fx.whole, *fx.saved, false);
  if (fuzz::accepts([&] { load_checkpoint_shard(fx.dir, *fx.whole, c, true); }))
    check_loaded(*fx.whole, *fx.saved, true);
  if (fuzz::accepts([&] { load_checkpoint_shard(fx.dir, *fx.sliced, c, true); }))
    check_loaded(*fx.sliced, *fx.saved, true);
  return 0;
}
