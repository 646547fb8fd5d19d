// Sharded checkpoints: N ranks' stores (whole or sliced as ZeRO stages 0-3 hold them) save
// shards, and M ranks' stores of any other layout load them; every element each store holds
// must come back bitwise (parameters and optimizer state, f32 and bf16 compute). Then damaged
// or mixed-up checkpoints: each refused with one clear error, and the store left as it was.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "error_of.h"
#include "test_files.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/safetensors.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/core/rng.h"
#include "tide/model/layout.h"

using namespace tide;
using tide::test::error_of;
using tide::test::temp_dir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Two layers, an odd vocabulary: tensors of many sizes, several chunks, tensors straddling
// slice boundaries at every group size.
GPTConfig small() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 37;
  c.max_seq_len = 8;
  return c;
}

const ChunkKind kSaved[] = {ChunkKind::PARAM, ChunkKind::MASTER, ChunkKind::ADAM_M,
                            ChunkKind::ADAM_V};

// The kinds a store of `compute` dtype holds distinct data in (with f32, MASTER is PARAM).
bool distinct(ChunkKind k, DType compute) {
  return !(k == ChunkKind::MASTER && compute == DType::F32);
}

std::unique_ptr<ChunkStore> make_store(const GPTConfig& c, DType compute, int64_t target, int group,
                                       int rank, unsigned sliced, bool with_optimizer = true) {
  ChunkLayout lay = make_layout(c);
  lay.pack(target, group);
  StoreOptions o;
  o.compute_dtype = compute;
  o.with_optimizer = with_optimizer;
  o.group_rank = rank;
  o.sliced_kinds = sliced;
  return std::make_unique<ChunkStore>(std::move(lay), o);
}

// A whole store with every element of every kind its own value.
std::unique_ptr<ChunkStore> reference(const GPTConfig& c, DType compute, uint64_t seed) {
  auto s = make_store(c, compute, 0, 1, 0, 0);
  for (ChunkKind k : kSaved) {
    if (!distinct(k, compute)) continue;
    const PhiloxStream rng{seed, static_cast<uint64_t>(k)};
    uint64_t i = 0;
    for (int id = 0; id < s->layout().num_tensors(); ++id) {
      const Tensor t = s->tensor(k, id);
      if (t.dtype == DType::F32)
        for (int64_t e = 0; e < t.numel(); ++e) t.f32()[e] = rng.normal(i++);
      else
        for (int64_t e = 0; e < t.numel(); ++e) t.u16()[e] = static_cast<uint16_t>(rng.uint(i++));
    }
  }
  return s;
}

// Calls f(kind, id, lo, hi, held) for every element range [lo, hi) of tensor `id` that `s`
// holds, `held` pointing at element lo in s.
template <class F>
void for_each_held(const ChunkStore& s, F&& f) {
  for (ChunkKind k : kSaved) {
    if (!s.has(k) || !distinct(k, s.compute_dtype())) continue;
    for (int id = 0; id < s.layout().num_tensors(); ++id) {
      const TensorSlot& slot = s.layout().slot(id);
      const Chunk& ch = s.chunk_info(k, slot.chunk);
      const int64_t lo = std::max(slot.offset, ch.begin);
      const int64_t hi = std::min(slot.offset + slot.numel, ch.begin + ch.elems);
      if (lo >= hi) continue;
      char* p = static_cast<char*>(ch.data) + (lo - ch.begin) * int64_t(dtype_size(ch.dtype));
      f(k, id, lo - slot.offset, hi - slot.offset, p);
    }
  }
}

// Copies what `s` holds from the whole store `ref`.
void copy_from(ChunkStore& s, const ChunkStore& ref) {
  for_each_held(s, [&](ChunkKind k, int id, int64_t lo, int64_t hi, char* p) {
    const Tensor t = ref.tensor(k, id);
    const size_t es = dtype_size(t.dtype);
    std::memcpy(p, static_cast<const char*>(t.data) + lo * es, (hi - lo) * es);
  });
}

// Every element `s` holds equals `ref`'s, bit for bit; the number of mismatching ranges.
int mismatches(const ChunkStore& s, const ChunkStore& ref, bool optimizer_state = true) {
  int bad = 0;
  for_each_held(s, [&](ChunkKind k, int id, int64_t lo, int64_t hi, char* p) {
    if (!optimizer_state && k != ChunkKind::PARAM) return;
    const Tensor t = ref.tensor(k, id);
    const size_t es = dtype_size(t.dtype);
    if (std::memcmp(p, static_cast<const char*>(t.data) + lo * es, (hi - lo) * es) != 0) {
      ADD_FAILURE() << chunk_kind_name(k) << " " << s.layout().slot(id).name << " [" << lo << ", "
                    << hi << ") differs";
      ++bad;
    }
  });
  return bad;
}

// Fills every byte a store holds with 0xff (NaNs), so that an element a load misses shows.
void poison(ChunkStore& s) {
  for_each_held(s, [&](ChunkKind k, int id, int64_t lo, int64_t hi, char* p) {
    (void)id;
    std::memset(p, 0xff, (hi - lo) * dtype_size(s.chunk_info(k, 0).dtype));
  });
}

// Raw bytes of everything a store holds (to see that a refused load changed nothing).
std::string snapshot(const ChunkStore& s) {
  std::string out;
  for_each_held(s, [&](ChunkKind k, int, int64_t lo, int64_t hi, char* p) {
    out.append(p, (hi - lo) * dtype_size(s.chunk_info(k, 0).dtype));
  });
  return out;
}

CheckpointInfo info_of(const GPTConfig& c) {
  CheckpointInfo info;
  info.config = c;
  info.step = 1234;
  info.tokenizer = "tok.json";
  info.extra = {{"lr", 0.5}, {"name", "run"}};
  return info;
}

// Saves `ref` as N ranks' shards (stores sliced as ZeRO stage `stage`) and commits.
void save_sharded(const std::string& dir, const ChunkStore& ref, int N, int stage,
                  int64_t target = 96, bool with_optimizer_state = true) {
  const GPTConfig c = small();
  for (int r = 0; r < N; ++r) {
    auto s = make_store(c, ref.compute_dtype(), target, N, r, zero_sliced_kinds(stage));
    copy_from(*s, ref);
    save_checkpoint_shard(dir, *s, info_of(c), with_optimizer_state, r, N);
  }
  commit_sharded_checkpoint(dir, N);
}

void flip_byte(const std::string& path, uint64_t from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(f.tellg());
  f.seekg(static_cast<std::streamoff>(size - from_end));
  char b;
  f.read(&b, 1);
  b ^= 0x10;
  f.seekp(static_cast<std::streamoff>(size - from_end));
  f.write(&b, 1);
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

void write_json(const std::string& path, const json& j) {
  std::ofstream(path) << j.dump(1);
}

}  // namespace

// --- round trips ------------------------------------------------------------------------------

struct Reshard {
  int N, M;
};

TEST(ShardedCheckpoint, ReshardsBitwiseAcrossGroupSizesStagesAndDtypes) {
  const GPTConfig c = small();
  const Reshard cases[] = {{4, 2}, {2, 3}, {3, 1}, {1, 4}, {2, 2}};
  // (save stage, load stage): whole stores, ZeRO 1, 2, 3, and mixes of them.
  const std::pair<int, int> stages[] = {{0, 0}, {1, 3}, {3, 1}, {2, 2}, {3, 3}, {0, 3}};
  for (DType dt : {DType::F32, DType::BF16}) {
    const auto ref = reference(c, dt, 7);
    for (const Reshard& rs : cases)
      for (const auto& [save_stage, load_stage] : stages) {
        SCOPED_TRACE(fmt::format("{} N={} M={} save stage {} load stage {}", dtype_name(dt), rs.N,
                                 rs.M, save_stage, load_stage));
        const std::string dir = temp_dir("reshard") + "/ckpt";
        save_sharded(dir, *ref, rs.N, save_stage);
        for (int r = 0; r < rs.M; ++r) {
          // Another chunk size than the save's: tensor offsets differ, values must not.
          auto s = make_store(c, dt, 160, rs.M, r, zero_sliced_kinds(load_stage));
          poison(*s);
          load_checkpoint_shard(dir, *s, c, /*with_optimizer_state=*/true);
          EXPECT_EQ(mismatches(*s, *ref), 0);
        }
      }
  }
}

TEST(ShardedCheckpoint, ManyRanksSomeOfWhichOwnOnlyPadding) {
  // 64 ranks of a small model: the chunks round up to 16 x 64 elements, so the last ranks'
  // slices of small chunks are padding alone and their shards hold few or no pieces.
  const GPTConfig c = small();
  const auto ref = reference(c, DType::BF16, 21);
  const std::string dir = temp_dir("many") + "/ckpt";
  save_sharded(dir, *ref, 64, 3);
  EXPECT_EQ(read_sharded_checkpoint_info(dir).world_size, 64);
  for (int r = 0; r < 3; ++r) {
    auto s = make_store(c, DType::BF16, 500, 3, r, zero_sliced_kinds(1));
    poison(*s);
    load_checkpoint_shard(dir, *s, c, true);
    EXPECT_EQ(mismatches(*s, *ref), 0);
  }
}

TEST(ShardedCheckpoint, ShardsHoldEveryElementOnceAndTheIndexDescribesThem) {
  const GPTConfig c = small();
  const auto ref = reference(c, DType::BF16, 3);
  const std::string dir = temp_dir("once") + "/ckpt";
  save_sharded(dir, *ref, 3, /*stage=*/0);  // whole stores: each still writes only its slice
  const ShardedCheckpointInfo x = read_sharded_checkpoint_info(dir);
  EXPECT_EQ(x.world_size, 3);
  EXPECT_EQ(x.compute_dtype, DType::BF16);
  EXPECT_EQ(x.info.step, 1234);
  EXPECT_EQ(x.info.tokenizer, "tok.json");
  EXPECT_EQ(x.info.extra["name"], "run");
  EXPECT_TRUE(x.info.optimizer_state);
  const uint64_t P = static_cast<uint64_t>(c.num_parameters());
  EXPECT_EQ(x.total_bytes, P * 2 + 3 * P * 4);  // bf16 params + master, m, v: no duplicates
  uint64_t in_files = 0;
  for (int r = 0; r < 3; ++r) {
    const std::string path = dir + "/" + shard_file_name(r, 3);
    EXPECT_EQ(shard_file_name(r, 3), fmt::format("shard-0000{}-of-00003.safetensors", r));
    SafetensorsReader reader(path, "shard");
    for (const SafetensorsEntry& e : reader.entries()) in_files += e.nbytes;
  }
  EXPECT_EQ(in_files, x.total_bytes);
  const json index = read_json(dir + "/index.json");
  EXPECT_EQ(index["metadata"]["format"], "tide-sharded");
  EXPECT_EQ(index["weight_map"]["adam_v.h.1.mlp.c_fc.weight"][0]["begin"], 0);
  EXPECT_FALSE(fs::exists(dir + ".partial"));
  EXPECT_TRUE(is_sharded_checkpoint(dir));
}

TEST(ShardedCheckpoint, ParamsOnlyCheckpointInitialisesButCannotResume) {
  const GPTConfig c = small();
  const auto ref = reference(c, DType::F32, 5);
  const std::string dir = temp_dir("params") + "/ckpt";
  save_sharded(dir, *ref, 2, 3, 96, /*with_optimizer_state=*/false);
  auto s = make_store(c, DType::F32, 0, 1, 0, 0);
  load_checkpoint_shard(dir, *s, c);
  EXPECT_EQ(mismatches(*s, *ref, /*optimizer_state=*/false), 0);
  EXPECT_NE(error_of([&] {
              load_checkpoint_shard(dir, *s, c, true);
            }).find("saved without optimizer state"),
            std::string::npos);
  EXPECT_FALSE(read_sharded_checkpoint_info(dir).info.optimizer_state);
}

// A bf16 run's checkpoint into an f32 model without optimizer state (tide sample): the master
// weights bit for bit, or without them the bf16 parameters widened. Resuming in f32 is refused.
TEST(ShardedCheckpoint, Bf16CheckpointLoadsIntoAnF32ModelWithoutOptimizerState) {
  const GPTConfig c = small();
  const auto ref = reference(c, DType::BF16, 8);
  for (bool with_master : {true, false}) {
    const std::string dir = temp_dir(with_master ? "bf16_master" : "bf16_params") + "/ckpt";
    save_sharded(dir, *ref, 2, 3, 96, /*with_optimizer_state=*/with_master);
    auto s = make_store(c, DType::F32, 0, 1, 0, 0);
    load_checkpoint_shard(dir, *s, c);
    const ChunkKind from = with_master ? ChunkKind::MASTER : ChunkKind::PARAM;
    for (int id = 0; id < s->layout().num_tensors(); ++id) {
      const Tensor want = ref->tensor(from, id), got = s->tensor(ChunkKind::PARAM, id);
      std::vector<float> wide(static_cast<size_t>(want.numel()));
      convert_elements(want.data, want.dtype, wide.data(), DType::F32, want.numel());
      EXPECT_EQ(std::memcmp(wide.data(), got.data, got.nbytes()), 0)
          << (with_master ? "master" : "widened") << ": " << s->layout().slot(id).name;
    }
    if (with_master)
      EXPECT_NE(error_of([&] {
                  load_checkpoint_shard(dir, *s, c, true);
                }).find("holds bf16 parameters but this model computes in f32"),
                std::string::npos);
  }
}

TEST(ShardedCheckpoint, CommitReplacesAnOlderCheckpointAtomically) {
  const GPTConfig c = small();
  const std::string dir = temp_dir("replace") + "/ckpt";
  save_sharded(dir, *reference(c, DType::F32, 1), 4, 1);
  const auto second = reference(c, DType::F32, 2);
  save_sharded(dir, *second, 2, 2);  // another world size: the old shards must go
  auto s = make_store(c, DType::F32, 0, 1, 0, 0);
  load_checkpoint_shard(dir, *s, c, true);
  EXPECT_EQ(mismatches(*s, *second), 0);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 3);  // index + 2 shards
  EXPECT_FALSE(fs::exists(dir + ".partial"));
}

// A run resumed on another layout saves the other kind of checkpoint at the same path (its
// out_dir's model.ckpt): a sharded save replaces a single file, and a single-file save a
// sharded folder, each loading back bitwise (once the end of a run that had trained for hours
// refused: "exists and is not a sharded checkpoint").
TEST(ShardedCheckpoint, EachKindReplacesTheOther) {
  const GPTConfig c = small();
  const std::string path = temp_dir("kinds") + "/model.ckpt";
  const auto first = reference(c, DType::BF16, 3), second = reference(c, DType::BF16, 4),
             third = reference(c, DType::BF16, 5);
  save_checkpoint(path, *first, info_of(c), true);
  ASSERT_TRUE(is_checkpoint_file(path));
  save_sharded(path, *second, 2, 1);
  ASSERT_TRUE(is_sharded_checkpoint(path));
  auto s = make_store(c, DType::BF16, 0, 1, 0, 0);
  load_checkpoint_shard(path, *s, c, true);
  EXPECT_EQ(mismatches(*s, *second), 0);
  save_checkpoint(path, *third, info_of(c), true);
  ASSERT_TRUE(is_checkpoint_file(path));
  load_checkpoint(path, *s, c, true);
  EXPECT_EQ(mismatches(*s, *third), 0);
  for (const char* left : {".partial", ".file", ".old"})
    EXPECT_FALSE(fs::exists(path + left)) << left;
}

// --- errors -----------------------------------------------------------------------------------

struct ShardedCheckpointErrors : ::testing::Test {
  GPTConfig c = small();
  std::unique_ptr<ChunkStore> ref = reference(c, DType::BF16, 11);
  std::string dir;
  // Rank 1 of M = 2 at ZeRO-1 (whole parameters: it reads every shard), other values.
  std::unique_ptr<ChunkStore> target;
  std::string before;
  void SetUp() override {
    dir = temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/ckpt";
    save_sharded(dir, *ref, 3, 3);
    target = make_store(c, DType::BF16, 0, 2, 1, zero_sliced_kinds(1));
    copy_from(*target, *reference(c, DType::BF16, 99));
    before = snapshot(*target);
  }
  // The load's error (it must fail, and leave the store as it was).
  std::string load_error(const GPTConfig& config) {
    const std::string e = error_of([&] { load_checkpoint_shard(dir, *target, config, true); });
    EXPECT_FALSE(e.empty());
    EXPECT_EQ(snapshot(*target), before) << "a refused load changed the store";
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    return e;
  }
  std::string load_error() { return load_error(c); }
};

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST_F(ShardedCheckpointErrors, MissingShard) {
  fs::remove(dir + "/" + shard_file_name(2, 3));
  EXPECT_HAS(load_error(), "shard-00002-of-00003.safetensors' is missing");
  EXPECT_HAS(error_of([&] { read_sharded_checkpoint_info(dir); }), "is missing");
}

// A '.partial' folder is never loaded, even one whose index.json was written (a commit caught
// before its rename): every reader says it is an uncommitted save and names the checkpoint.
TEST_F(ShardedCheckpointErrors, UncommittedPartialFolderIsNeverLoaded) {
  const std::string partial = dir + ".partial";
  fs::copy(dir, partial);
  const std::string e = error_of([&] { load_checkpoint_shard(partial, *target, c, true); });
  EXPECT_HAS(e, "'" + partial + "' is an uncommitted checkpoint");
  EXPECT_HAS(e, "name the committed checkpoint '" + dir + "' instead");
  EXPECT_EQ(snapshot(*target), before);
  EXPECT_HAS(error_of([&] { read_sharded_checkpoint_info(partial); }), "uncommitted checkpoint");
  EXPECT_HAS(error_of([&] { read_checkpoint_info(partial); }), "uncommitted checkpoint");
  // Without a committed one beside it: an earlier checkpoint of the run's folder.
  fs::remove_all(dir);
  EXPECT_HAS(error_of([&] { read_sharded_checkpoint_info(partial); }),
             "name a committed checkpoint instead (an earlier model_step<N>.ckpt or model.ckpt "
             "in '" +
                 fs::path(dir).parent_path().string() + "')");
}

TEST_F(ShardedCheckpointErrors, CorruptShardFailsItsChecksum) {
  flip_byte(dir + "/" + shard_file_name(1, 3), 5);
  EXPECT_HAS(load_error(), "checksum mismatch");
}

TEST_F(ShardedCheckpointErrors, ShardFromAnotherSave) {
  // The same world size and step, other values: the index's checksum tells them apart.
  const std::string other = temp_dir("other") + "/ckpt";
  save_sharded(other, *reference(c, DType::BF16, 12), 3, 3);
  fs::copy_file(other + "/" + shard_file_name(0, 3), dir + "/" + shard_file_name(0, 3),
                fs::copy_options::overwrite_existing);
  EXPECT_HAS(load_error(), "comes from another save");
}

TEST_F(ShardedCheckpointErrors, IndexNamesATensorNoShardHolds) {
  json j = read_json(dir + "/index.json");
  j["weight_map"]["adam_m.h.0.ln_1.bias"][0]["key"] = "adam_m.h.0.ln_1.bias.gone";
  write_json(dir + "/index.json", j);
  EXPECT_HAS(load_error(), "which the index does not list");
}

TEST_F(ShardedCheckpointErrors, IndexNamesATensorTheModelHasNot) {
  json j = read_json(dir + "/index.json");
  j["weight_map"]["h.7.attn.c_attn.weight"] = j["weight_map"]["h.0.attn.c_attn.weight"];
  write_json(dir + "/index.json", j);
  EXPECT_HAS(load_error(), "names tensor 'h.7.attn.c_attn.weight'");
}

TEST_F(ShardedCheckpointErrors, IndexLacksATensor) {
  json j = read_json(dir + "/index.json");
  j["weight_map"].erase("master.wpe");
  write_json(dir + "/index.json", j);
  EXPECT_HAS(load_error(), "has no pieces for tensor 'master.wpe'");
}

TEST_F(ShardedCheckpointErrors, IndexPiecesLeaveAGap) {
  json j = read_json(dir + "/index.json");
  json& pieces = j["weight_map"]["wte"];
  ASSERT_GE(pieces.size(), 2u);
  pieces.erase(pieces.begin());
  write_json(dir + "/index.json", j);
  EXPECT_HAS(load_error(), "the pieces of tensor 'wte' leave a gap");
}

TEST_F(ShardedCheckpointErrors, IndexIsNotJson) {
  std::ofstream(dir + "/index.json") << "{\"metadata\": ";
  EXPECT_HAS(load_error(), "index.json is not valid JSON");
}

TEST_F(ShardedCheckpointErrors, ModelShapeMismatch) {
  GPTConfig other = c;
  other.n_layer = 3;
  target = make_store(other, DType::BF16, 0, 2, 1, zero_sliced_kinds(3));
  before = snapshot(*target);
  EXPECT_HAS(load_error(other), "holds a model L=2");
}

TEST_F(ShardedCheckpointErrors, ComputeDtypeMismatch) {
  target = make_store(c, DType::F32, 0, 2, 1, zero_sliced_kinds(3));
  before = snapshot(*target);
  EXPECT_HAS(load_error(), "holds bf16 parameters but this model computes in f32");
}

TEST_F(ShardedCheckpointErrors, SingleFileAndDirectoryAreNotConfused) {
  // The single-file loader pointed at a directory...
  EXPECT_HAS(error_of([&] { load_checkpoint(dir, *target, c); }), "is a sharded checkpoint");
  EXPECT_HAS(error_of([&] { read_checkpoint_info(dir); }), "load_checkpoint_shard");
  // ...and the sharded loader at a file.
  const std::string file = fs::path(dir).parent_path() / "one.ckpt";
  auto whole = make_store(c, DType::BF16, 0, 1, 0, 0);
  save_checkpoint(file, *whole, info_of(c), true);
  EXPECT_FALSE(is_sharded_checkpoint(file));
  EXPECT_HAS(error_of([&] { load_checkpoint_shard(file, *target, c); }),
             "is a file, not a sharded checkpoint directory");
  EXPECT_HAS(error_of([&] { read_sharded_checkpoint_info(fs::path(dir).parent_path()); }),
             "has no index.json");
  EXPECT_EQ(snapshot(*target), before);
}

TEST_F(ShardedCheckpointErrors, CommitWithoutEveryShard) {
  const std::string d2 = fs::path(dir).parent_path() / "incomplete";
  auto s = make_store(c, DType::BF16, 96, 3, 0, zero_sliced_kinds(1));
  save_checkpoint_shard(d2, *s, info_of(c), true, 0, 3);
  EXPECT_HAS(error_of([&] { commit_sharded_checkpoint(d2, 3); }),
             "rank 1's shard '" + d2 + ".partial/shard-00001-of-00003.safetensors' is missing");
  EXPECT_FALSE(fs::exists(d2));
}

TEST_F(ShardedCheckpointErrors, CommitRefusesToReplaceSomethingElse) {
  const std::string d2 = fs::path(dir).parent_path() / "precious";
  fs::create_directories(d2);
  std::ofstream(d2 + "/notes.txt") << "keep me";
  auto s = make_store(c, DType::BF16, 96, 1, 0, 0);
  save_checkpoint_shard(d2, *s, info_of(c), true, 0, 1);
  EXPECT_HAS(error_of([&] { commit_sharded_checkpoint(d2, 1); }), "is not a tide checkpoint");
  EXPECT_TRUE(fs::exists(d2 + "/notes.txt"));
  // Nor a file that is not a tide checkpoint.
  const std::string d3 = fs::path(dir).parent_path() / "notes.ckpt";
  std::ofstream(d3) << "keep me too";
  save_checkpoint_shard(d3, *s, info_of(c), true, 0, 1);
  EXPECT_HAS(error_of([&] { commit_sharded_checkpoint(d3, 1); }), "is not a tide checkpoint");
  EXPECT_TRUE(fs::is_regular_file(d3));
}

TEST_F(ShardedCheckpointErrors, SaveChecksRankAndGroup) {
  auto s = make_store(c, DType::BF16, 96, 3, 1, zero_sliced_kinds(1));
  EXPECT_HAS(error_of([&] { save_checkpoint_shard(dir, *s, info_of(c), true, 2, 3); }),
             "holds rank 1's slice");
  EXPECT_HAS(error_of([&] { save_checkpoint_shard(dir, *s, info_of(c), true, 1, 4); }),
             "sliced for 3 ranks, not 4");
  GPTConfig other = c;
  other.n_embd = 32;
  EXPECT_HAS(error_of([&] { save_checkpoint_shard(dir, *s, info_of(other), true, 1, 3); }),
             "are not those of a");
}
