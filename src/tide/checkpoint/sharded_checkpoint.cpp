// Sharded checkpoints (see sharded_checkpoint.h). The index is parsed as hostile input, field by
// field; every shard a reader opens is verified (header, checksum) and cross-checked against
// the index (rank, world size, model, step, dtype, every piece) before any byte of it is used.
// A load computes all it will copy and opens every file it needs first, so a refused load
// leaves the store as it was.
#include "tide/checkpoint/sharded_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/checkpoint_meta.h"
#include "tide/checkpoint/safetensors.h"
#include "tide/checkpoint/tensor_to_write.h"
#include "tide/kernels/host_upload.h"
#include "tide/model/layout.h"

namespace tide {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

// Elements [lo, hi) of a store's tensor data, as held by `ch` (store.owned(kind, c)), on the
// chunk's device.
Tensor piece(const ChunkStore& store, ChunkKind kind, int c, const Chunk& ch, int64_t lo,
             int64_t hi) {
  const char* data =
      static_cast<const char*>(ch.data) + (lo - ch.begin) * int64_t(dtype_size(ch.dtype));
  return Tensor(const_cast<char*>(data), Shape{hi - lo}, ch.dtype, store.chunk(kind, c).device);
}

constexpr const char* kFormat = "tide-sharded";
constexpr int kVersion = 1;
constexpr const char* kIndexName = "index.json";
constexpr const char* kShardWhat = "checkpoint shard";
constexpr uint64_t kMaxIndexBytes = 1ull << 30;  // 1 GiB: ~10M pieces
constexpr int kMaxWorld = 1 << 20;

// "runs/x/ckpt/" -> "runs/x/ckpt" (so that "<dir>.partial" is a sibling, not a child).
std::string clean_dir(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

std::string partial_of(const std::string& dir) {
  return clean_dir(dir) + ".partial";
}

std::string who(const std::string& dir) {
  return fmt::format("sharded checkpoint '{}'", dir);
}

std::string errno_text() {
  return std::strerror(errno);
}

bool parse_compute_dtype(const std::string& s, DType* out) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    if (s == safetensors_dtype_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

// One tensor a checkpoint saves: its name, where it lives in a store, and its stored dtype.
struct Item {
  std::string name;
  ChunkKind kind;
  int id;
  int64_t numel;
  DType dtype;
};

// The tensors of a checkpoint of a model laid out as `layout`, in file order: the parameters,
// then (with the optimizer state) the master weights when they are not the parameters, Adam's
// m and v. The same names and order as checkpoint.cpp.
// A pipeline's last stage holds lm_head.weight, its copy of the tied wte (bitwise equal to it,
// Adam state included: the executor gives both copies the same summed gradient); the
// checkpoint holds the model's tensors, so that copy is stored, and read back, as "wte".
std::string checkpoint_name(const std::string& tensor) {
  return tensor == "lm_head.weight" ? "wte" : tensor;
}

std::vector<Item> items_of(const ChunkLayout& layout, DType compute, bool optimizer_state) {
  std::vector<Item> items;
  auto add = [&](ChunkKind kind, const std::string& prefix, DType t) {
    for (int id = 0; id < layout.num_tensors(); ++id)
      items.push_back(
          {prefix + checkpoint_name(layout.slot(id).name), kind, id, layout.slot(id).numel, t});
  };
  for (const CheckpointKind& k : checkpoint_kinds(compute, optimizer_state))
    add(k.kind, k.prefix, k.kind == ChunkKind::PARAM ? compute : DType::F32);
  return items;
}

// The store's layout must be the model's (names and shapes in order).
void check_layout(const ChunkLayout& layout, const GPTConfig& config, const std::string& subject) {
  const ChunkLayout expected = make_layout(config);
  bool same = expected.num_tensors() == layout.num_tensors();
  for (int id = 0; same && id < layout.num_tensors(); ++id)
    same = expected.slot(id).name == layout.slot(id).name &&
           expected.slot(id).shape == layout.slot(id).shape;
  TIDE_CHECK(same,
             "{}: the store's tensors are not those of a {} model; pass the config the store "
             "was built from",
             subject, config.str());
}

// A pipeline stage's layout (or the whole model's): every tensor is one of the model's, under
// its checkpoint name, with the model's shape.
void check_stage_layout(const ChunkLayout& layout, const GPTConfig& config,
                        const std::string& subject) {
  const ChunkLayout whole = make_layout(config);
  for (int id = 0; id < layout.num_tensors(); ++id) {
    const std::string name = checkpoint_name(layout.slot(id).name);
    const int w = whole.find(name);
    TIDE_CHECK(w >= 0 && whole.slot(w).shape == layout.slot(id).shape,
               "{}: the store's tensor '{}' is not one of a {} model's; pass the config the "
               "store was built from",
               subject, layout.slot(id).name, config.str());
  }
}

// A piece of a tensor in a shard file: elements [begin, end) of the flattened tensor.
struct Piece {
  int file = 0;  // the rank that wrote it
  std::string key;
  int64_t begin = 0, end = 0;
};

struct FileInfo {
  std::string checksum;
  uint64_t bytes = 0;
};

// index.json, parsed and checked: the pieces of every tensor tile it exactly.
struct Index {
  ShardedCheckpointInfo info;
  std::vector<FileInfo> files;                    // by rank
  std::map<std::string, std::vector<Piece>> map;  // tensor -> pieces sorted by begin
  std::map<std::string, DType> dtypes;            // tensor -> stored dtype
};

// The tide metadata of a shard (written into its safetensors header).
json shard_meta(const CheckpointInfo& info, bool with_optimizer_state, int rank, int world,
                DType compute, const json& pieces) {
  json m = checkpoint_meta_json(info, with_optimizer_state);
  m["format"] = kFormat;
  m["version"] = kVersion;
  m["rank"] = rank;
  m["world_size"] = world;
  m["compute_dtype"] = safetensors_dtype_name(compute);
  m["pieces"] = pieces;
  return m;
}

// The fields of an index's or a shard's metadata beyond CheckpointInfo.
void read_sharded_fields(const json& meta, const std::string& subject, ShardedCheckpointInfo* out) {
  TIDE_CHECK(meta.is_object(), "{}: its metadata is a JSON {}, not an object", subject,
             meta.type_name());
  const std::string& format = meta_string(meta, "format", "format", subject);
  TIDE_CHECK(format == kFormat,
             "{}: metadata 'format' is '{}', not '{}'; it was not written by tide", subject,
             printable_name(format), kFormat);
  const int64_t version = meta_integer(meta, "version", "version", 0, INT_MAX, subject);
  TIDE_CHECK(version == kVersion,
             "{} has format version {}, but this tide reads version {}; use the tide that wrote it",
             subject, version, kVersion);
  out->info = checkpoint_info_from_meta(meta, subject);
  out->world_size =
      static_cast<int>(meta_integer(meta, "world_size", "world_size", 1, kMaxWorld, subject));
  const std::string& dt = meta_string(meta, "compute_dtype", "compute_dtype", subject);
  TIDE_CHECK(parse_compute_dtype(dt, &out->compute_dtype),
             "{}: metadata 'compute_dtype' is '{}', not F32, BF16 or F16; the file is damaged",
             subject, printable_name(dt));
}

// Checks the parsed index JSON `j` of `dir` (everything but the shard files).
Index parse_index(const json& j, const std::string& dir) {
  const std::string w = who(dir);
  const std::string idx = fmt::format("{}: {}", w, kIndexName);
  TIDE_CHECK(j.is_object(), "{} is a JSON {}, not an object; the checkpoint is damaged", idx,
             j.type_name());
  Index index;
  read_sharded_fields(meta_member(j, "metadata", "metadata", idx), idx, &index.info);
  const json& meta = j["metadata"];
  index.info.total_bytes =
      static_cast<uint64_t>(meta_integer(meta, "total_size", "total_size", 0, INT64_MAX, idx));
  const int N = index.info.world_size;
  const GPTConfig& config = index.info.info.config;

  const json& files = meta_member(j, "files", "files", idx);
  TIDE_CHECK(files.is_object() && files.size() == static_cast<size_t>(N),
             "{}: 'files' must name the {} shard files of a world of {}; the checkpoint is "
             "damaged",
             idx, N, N);
  index.files.resize(N);
  std::map<std::string, int> rank_of;
  for (int r = 0; r < N; ++r) {
    const std::string name = shard_file_name(r, N);
    rank_of[name] = r;
    const std::string label = "files." + name;
    const json& f = meta_member(files, name.c_str(), label, idx);
    TIDE_CHECK(f.is_object(), "{}: '{}' is a JSON {}, not an object", idx, label, f.type_name());
    index.files[r].checksum = meta_string(f, "checksum", label + ".checksum", idx);
    index.files[r].bytes =
        static_cast<uint64_t>(meta_integer(f, "bytes", label + ".bytes", 8, INT64_MAX, idx));
  }

  // The tensors the checkpoint must hold, and only those.
  const json& map = meta_member(j, "weight_map", "weight_map", idx);
  TIDE_CHECK(map.is_object(), "{}: 'weight_map' is a JSON {}, not an object", idx, map.type_name());
  // A model of more layers than the map has tensors for cannot be the checkpoint's; refused
  // before its layout is built (a damaged n_layer of 10^8 took minutes and gigabytes). One
  // missing layer or tensor is named below.
  TIDE_CHECK(12 * (int64_t{config.n_layer} - 1) <= static_cast<int64_t>(map.size()),
             "{}: metadata 'model.n_layer' is {} but 'weight_map' lists only {} tensors (a layer "
             "has 12); the checkpoint is damaged",
             idx, config.n_layer, map.size());
  const ChunkLayout layout = make_layout(config);
  std::map<std::string, const Item*> expected;
  const std::vector<Item> items =
      items_of(layout, index.info.compute_dtype, index.info.info.optimizer_state);
  for (const Item& it : items) expected[it.name] = &it;
  for (const auto& [name, list] : map.items())
    TIDE_CHECK(expected.count(name),
               "{} names tensor '{}', which a {} checkpoint{} does not have; the checkpoint is "
               "damaged",
               idx, printable_name(name), config.str(),
               index.info.info.optimizer_state ? " with optimizer state" : "");
  for (const Item& it : items) {
    const auto found = map.find(it.name);
    TIDE_CHECK(found != map.end(), "{} has no pieces for tensor '{}'; the checkpoint is damaged",
               idx, it.name);
    TIDE_CHECK(found->is_array() && !found->empty(),
               "{}: the pieces of tensor '{}' must be a non-empty array", idx, it.name);
    std::vector<Piece> pieces;
    for (const json& p : *found) {
      const std::string label = fmt::format("weight_map.{}[]", it.name);
      TIDE_CHECK(p.is_object(), "{}: a piece of '{}' is a JSON {}, not an object", idx, it.name,
                 p.type_name());
      Piece piece;
      const std::string& file = meta_string(p, "file", label + ".file", idx);
      const auto r = rank_of.find(file);
      TIDE_CHECK(r != rank_of.end(),
                 "{}: a piece of '{}' is in file '{}', which is not one of the {} shards", idx,
                 it.name, printable_name(file), N);
      piece.file = r->second;
      piece.key = meta_string(p, "key", label + ".key", idx);
      piece.begin = meta_integer(p, "begin", label + ".begin", 0, it.numel - 1, idx);
      piece.end = meta_integer(p, "end", label + ".end", piece.begin + 1, it.numel, idx);
      pieces.push_back(std::move(piece));
    }
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
    int64_t at = 0;
    for (const Piece& p : pieces) {
      TIDE_CHECK(p.begin == at,
                 "{}: the pieces of tensor '{}' {} at element {}; the checkpoint is damaged", idx,
                 it.name, p.begin < at ? "overlap" : "leave a gap", std::min(p.begin, at));
      at = p.end;
    }
    TIDE_CHECK(at == it.numel,
               "{}: the pieces of tensor '{}' end at element {} of its {}; the checkpoint is "
               "damaged",
               idx, it.name, at, it.numel);
    index.map[it.name] = std::move(pieces);
    index.dtypes[it.name] = it.dtype;
  }
  return index;
}

// Reads index.json of `dir`, with a clear error for a file or a folder that is not one.
Index read_index(const std::string& dir) {
  const std::string w = who(dir);
  TIDE_CHECK(!is_uncommitted_checkpoint(dir), "{}", uncommitted_checkpoint_message(dir));
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  TIDE_CHECK(fs::exists(st), "{} does not exist; check the path", w);
  TIDE_CHECK(!fs::is_regular_file(st),
             "'{}' is a file, not a sharded checkpoint directory; it is a single-file "
             "checkpoint: load it with load_checkpoint (checkpoint.h)",
             dir);
  TIDE_CHECK(fs::is_directory(st), "{} is not a directory; check the path", w);
  const fs::path path = fs::path(dir) / kIndexName;
  TIDE_CHECK(fs::exists(path, ec),
             "{} has no {}: it is not a sharded checkpoint, or its save never completed (an "
             "uncommitted save is a '.partial' folder); check the path",
             w, kIndexName);
  const uint64_t size = fs::file_size(path, ec);
  TIDE_CHECK(!ec, "cannot read {}: {}: {}", w, kIndexName, ec.message());
  TIDE_CHECK(size <= kMaxIndexBytes,
             "{}: {} has {} bytes, more than the 1 GiB limit; it is damaged", w, kIndexName, size);
  std::ifstream f(path, std::ios::binary);
  TIDE_CHECK(f.good(), "cannot open {}: {}", w, kIndexName);
  std::string text(size, '\0');
  f.read(text.data(), static_cast<std::streamsize>(size));
  TIDE_CHECK(static_cast<uint64_t>(f.gcount()) == size, "cannot read {}: {} was cut short", w,
             kIndexName);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    TIDE_FAIL("{}: {} is not valid JSON; the checkpoint is damaged", w, kIndexName);
  }
  return parse_index(j, dir);
}

// Checks an opened shard against the index: its metadata (rank, world, model, step, dtype),
// the checksum the index recorded and every piece, both ways.
void check_shard(const SafetensorsReader& r, const Index& index, int rank) {
  const std::string subject = fmt::format("{} '{}'", kShardWhat, r.path());
  ShardedCheckpointInfo s;
  read_sharded_fields(r.metadata(), subject, &s);
  const ShardedCheckpointInfo& x = index.info;
  const int64_t meta_rank =
      meta_integer(r.metadata(), "rank", "rank", 0, x.world_size - 1, subject);
  TIDE_CHECK(meta_rank == rank && s.world_size == x.world_size,
             "{} was written by rank {} of {}, but the index expects rank {} of {} there; the "
             "checkpoint's files were mixed up",
             subject, meta_rank, s.world_size, rank, x.world_size);
  TIDE_CHECK(same_model_shape(s.info.config, x.info.config) && s.info.step == x.info.step &&
                 s.info.optimizer_state == x.info.optimizer_state &&
                 s.compute_dtype == x.compute_dtype,
             "{} holds step {} of a {} model, but the index says step {} of a {} model; the "
             "checkpoint's files come from different saves",
             subject, s.info.step, s.info.config.str(), x.info.step, x.info.config.str());
  TIDE_CHECK(r.checksum() == index.files[rank].checksum,
             "{} has checksum {} but the index recorded {}; the file comes from another save",
             subject, r.checksum(), printable_name(index.files[rank].checksum));
  // Pieces: the index's for this file, by key.
  std::map<std::string, std::pair<const std::string*, const Piece*>> listed;
  for (const auto& [name, pieces] : index.map)
    for (const Piece& p : pieces)
      if (p.file == rank) listed[p.key] = {&name, &p};
  const json& pieces = meta_member(r.metadata(), "pieces", "pieces", subject);
  TIDE_CHECK(pieces.is_object(), "{}: metadata 'pieces' is a JSON {}, not an object", subject,
             pieces.type_name());
  for (const SafetensorsEntry& e : r.entries()) {
    const auto it = listed.find(e.name);
    TIDE_CHECK(it != listed.end(),
               "{} holds '{}', which the index does not list; the checkpoint is damaged", subject,
               printable_name(e.name));
    const std::string& tensor = *it->second.first;
    const Piece& p = *it->second.second;
    const std::string label = "pieces." + e.name;
    const json& mp = meta_member(pieces, e.name.c_str(), label, subject);
    TIDE_CHECK(mp.is_object(), "{}: metadata '{}' is not an object", subject, label);
    const std::string& mtensor = meta_string(mp, "tensor", label + ".tensor", subject);
    const int64_t mb = meta_integer(mp, "begin", label + ".begin", 0, INT64_MAX, subject);
    const int64_t me = meta_integer(mp, "end", label + ".end", 0, INT64_MAX, subject);
    TIDE_CHECK(mtensor == tensor && mb == p.begin && me == p.end,
               "{}: piece '{}' is elements [{}, {}) of '{}', but the index says [{}, {}) of '{}'; "
               "the checkpoint is damaged",
               subject, e.name, mb, me, printable_name(mtensor), p.begin, p.end, tensor);
    const DType want = index.dtypes.at(tensor);
    TIDE_CHECK(e.dtype == want && e.shape == Shape{p.end - p.begin},
               "{}: piece '{}' is {} of shape {}, but {} of shape ({}) was expected; the "
               "checkpoint is damaged",
               subject, e.name, safetensors_dtype_name(e.dtype), e.shape.str(),
               safetensors_dtype_name(want), p.end - p.begin);
  }
  TIDE_CHECK(r.entries().size() == listed.size() && pieces.size() == listed.size(),
             "{} holds {} pieces but the index lists {} in it; the checkpoint is damaged", subject,
             r.entries().size(), listed.size());
}

// Overwrites `path` with `text` atomically (temporary, fsync, rename).
void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TIDE_CHECK(fd >= 0, "cannot write '{}': {}", tmp, errno_text());
  const char* p = text.data();
  size_t n = text.size();
  bool ok = true;
  while (ok && n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    ok = put > 0;
    if (ok) p += put, n -= static_cast<size_t>(put);
  }
  ok = ok && ::fsync(fd) == 0;
  const std::string err = errno_text();
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    TIDE_FAIL("cannot write '{}': {}; check the free space on its disk", path, err);
  }
}

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TIDE_CHECK(fd >= 0, "cannot open directory '{}' to sync it: {}", dir, errno_text());
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  TIDE_CHECK(rc == 0 || err == EINVAL, "syncing directory '{}' failed: {}", dir,
             std::strerror(err));
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string shard_file_name(int rank, int world) {
  return fmt::format("shard-{:05d}-of-{:05d}.safetensors", rank, world);
}

bool is_sharded_checkpoint(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / kIndexName, ec);
}

bool is_uncommitted_checkpoint(const std::string& path) {
  // By name: a '.partial' folder can hold an index.json too (a commit interrupted between
  // writing it and the rename), and is still not a checkpoint.
  const std::string d = clean_dir(path);
  constexpr std::string_view kSuffix = ".partial";
  std::error_code ec;
  return d.size() > kSuffix.size() && d.ends_with(kSuffix) && fs::is_directory(d, ec);
}

std::string uncommitted_checkpoint_message(const std::string& path) {
  const std::string partial = clean_dir(path);
  const std::string target =
      partial.substr(0, partial.size() - std::string_view(".partial").size());
  std::string instead;
  if (is_sharded_checkpoint(target)) {
    instead = fmt::format("name the committed checkpoint '{}' instead", target);
  } else {
    const std::string parent = fs::path(target).parent_path().string();
    instead = fmt::format(
        "name a committed checkpoint instead (an earlier model_step<N>.ckpt or model.ckpt in "
        "'{}')",
        parent.empty() ? "." : parent);
  }
  return fmt::format(
      "'{}' is an uncommitted checkpoint: the folder a sharded save writes its shards into, "
      "which becomes the checkpoint '{}' only when every rank has finished; this save never "
      "completed, so tide never loads it; {}",
      path, target, instead);
}

void save_checkpoint_shard(const std::string& dir, const ChunkStore& store,
                           const CheckpointInfo& info, bool with_optimizer_state, int rank,
                           int world) {
  const ChunkLayout& layout = store.layout();
  const std::string subject = fmt::format("cannot save rank {}'s shard of '{}'", rank, dir);
  TIDE_CHECK(world >= 1 && world <= kMaxWorld && rank >= 0 && rank < world,
             "{}: rank {} is outside a world of {}", subject, rank, world);
  TIDE_CHECK(layout.group_size() == world,
             "{}: the store's chunks are sliced for {} ranks, not {}; pack the layout for the "
             "data-parallel group (ChunkLayout::pack(target, {}))",
             subject, layout.group_size(), world, world);
  check_layout(layout, info.config, subject);
  TIDE_CHECK(
      !with_optimizer_state || (store.has(ChunkKind::ADAM_M) && store.has(ChunkKind::ADAM_V)),
      "{}: the model was built without optimizer state", subject);
  const DType compute = store.compute_dtype();
  const std::vector<Item> items = items_of(layout, compute, with_optimizer_state);
  for (const Item& it : items)
    TIDE_CHECK(!store.sliced(it.kind) || store.options().group_rank == rank,
               "{}: the store holds rank {}'s slice of its {} chunks, not rank {}'s", subject,
               store.options().group_rank, chunk_kind_name(it.kind), rank);

  // Rank r's piece of each tensor: its overlap with slice r of its chunk, written straight
  // from wherever the store holds it.
  std::vector<SafetensorsTensor> tensors;
  json pieces = json::object();
  for (const Item& it : items) {
    const TensorSlot& s = layout.slot(it.id);
    const int64_t slice = layout.slice_elems(s.chunk);
    const int64_t lo = std::max(s.offset, rank * slice);
    const int64_t hi = std::min(s.offset + s.numel, (rank + 1) * slice);
    if (lo >= hi) continue;
    const Chunk ch = store.owned(it.kind, s.chunk);
    TIDE_CHECK(ch.data != nullptr, "{}: {} chunk {} is not resident", subject,
               chunk_kind_name(it.kind), s.chunk);
    TIDE_CHECK(lo >= ch.begin && hi <= ch.begin + ch.elems,
               "{}: the store does not hold rank {}'s part of tensor '{}' ({})", subject, rank,
               s.name, chunk_kind_name(it.kind));
    tensors.push_back(
        tensor_to_write(it.name, piece(store, it.kind, s.chunk, ch, lo, hi), nullptr, subject));
    pieces[it.name] = {{"tensor", it.name}, {"begin", lo - s.offset}, {"end", hi - s.offset}};
  }
  const std::string path = (fs::path(partial_of(dir)) / shard_file_name(rank, world)).string();
  write_safetensors(path, tensors,
                    shard_meta(info, with_optimizer_state, rank, world, compute, pieces));
}

void save_pipeline_stage_shard(const std::string& dir, const std::vector<const ChunkStore*>& stores,
                               const CheckpointInfo& info, bool with_optimizer_state, int rank,
                               int world, int dp_rank, int dp, const OpContext* copies) {
  const std::string subject =
      dp > 1 ? fmt::format("cannot save stage {} replica {}'s shard of '{}'", rank, dp_rank, dir)
             : fmt::format("cannot save stage {}'s shard of '{}'", rank, dir);
  TIDE_CHECK(world >= 1 && dp >= 1 && world * dp <= kMaxWorld && rank >= 0 && rank < world &&
                 dp_rank >= 0 && dp_rank < dp,
             "{}: stage {} (replica {}) is outside a pipeline of {} stages x {} replicas", subject,
             rank, dp_rank, world, dp);
  std::vector<SafetensorsTensor> tensors;
  json pieces = json::object();
  DType compute = DType::F32;
  for (size_t k = 0; k < stores.size(); ++k) {
    const ChunkStore& store = *stores[k];
    const ChunkLayout& layout = store.layout();
    check_stage_layout(layout, info.config, subject);
    TIDE_CHECK(
        !with_optimizer_state || (store.has(ChunkKind::ADAM_M) && store.has(ChunkKind::ADAM_V)),
        "{}: the model was built without optimizer state", subject);
    TIDE_CHECK(k == 0 || store.compute_dtype() == compute,
               "{}: the stage's model chunks compute in different dtypes", subject);
    compute = store.compute_dtype();
    TIDE_CHECK(dp == 1 || layout.group_size() == dp,
               "{}: the stage's chunks are sliced for {} ranks, not the {} replicas", subject,
               layout.group_size(), dp);
    for (const Item& it : items_of(layout, compute, with_optimizer_state)) {
      const TensorSlot& s = layout.slot(it.id);
      if (s.name == "lm_head.weight") continue;  // wte's copy: the first stage saves wte
      // The tensor's overlap with replica dp_rank's slice of its chunk (ZeRO's partition: a
      // sliced kind holds exactly that; a whole one contributes only that part), so the
      // replicas' pieces tile the stage's tensors; with dp = 1 the tensor whole.
      int64_t lo = s.offset, hi = s.offset + s.numel;
      if (dp > 1) {
        const int64_t slice = layout.slice_elems(s.chunk);
        lo = std::max(lo, dp_rank * slice);
        hi = std::min(hi, (dp_rank + 1) * slice);
        if (lo >= hi) continue;
      }
      TIDE_CHECK(!store.sliced(it.kind) ||
                     (layout.group_size() == dp && store.options().group_rank == dp_rank),
                 "{}: the store holds a slice of its {} chunks that is not replica {}'s", subject,
                 chunk_kind_name(it.kind), dp_rank);
      const Chunk ch = store.owned(it.kind, s.chunk);
      TIDE_CHECK(ch.data != nullptr, "{}: {} chunk {} is not resident", subject,
                 chunk_kind_name(it.kind), s.chunk);
      TIDE_CHECK(lo >= ch.begin && hi <= ch.begin + ch.elems,
                 "{}: the store does not hold replica {}'s part of tensor '{}' ({})", subject,
                 dp_rank, s.name, chunk_kind_name(it.kind));
      tensors.push_back(
          tensor_to_write(it.name, piece(store, it.kind, s.chunk, ch, lo, hi), copies, subject));
      pieces[it.name] = {{"tensor", it.name}, {"begin", lo - s.offset}, {"end", hi - s.offset}};
    }
  }
  const int file = rank * dp + dp_rank, files = world * dp;
  const std::string path = (fs::path(partial_of(dir)) / shard_file_name(file, files)).string();
  write_safetensors(path, tensors,
                    shard_meta(info, with_optimizer_state, file, files, compute, pieces));
}

void commit_sharded_checkpoint(const std::string& dir, int world) {
  const std::string target = clean_dir(dir), partial = partial_of(dir);
  const std::string subject = fmt::format("cannot commit sharded checkpoint '{}'", target);
  TIDE_CHECK(world >= 1 && world <= kMaxWorld, "{}: world size {} is not in [1, {}]", subject,
             world, kMaxWorld);
  std::error_code ec;
  TIDE_CHECK(fs::is_directory(partial, ec),
             "{}: '{}' does not exist; call save_checkpoint_shard on every rank first", subject,
             partial);
  // A single-file checkpoint there (an earlier run of this out_dir on one rank, resumed on
  // another layout) is replaced like a sharded one.
  if (fs::exists(target, ec))
    TIDE_CHECK(is_sharded_checkpoint(target) || is_checkpoint_file(target),
               "{}: '{}' exists and is not a tide checkpoint; tide replaces only its own "
               "checkpoints, choose another path",
               subject, target);

  // The shards' headers (their data was checksummed as it was written).
  ojson files = ojson::object();
  json map = json::object();
  json meta;
  uint64_t total = 0;
  for (int r = 0; r < world; ++r) {
    const std::string name = shard_file_name(r, world);
    const std::string path = (fs::path(partial) / name).string();
    TIDE_CHECK(fs::is_regular_file(path, ec),
               "{}: rank {}'s shard '{}' is missing; every rank's save_checkpoint_shard must "
               "return before the commit (a barrier)",
               subject, r, path);
    const SafetensorsReader reader(path, kShardWhat, /*verify_checksum=*/false);
    const std::string shard = fmt::format("{} '{}'", kShardWhat, path);
    ShardedCheckpointInfo s;
    read_sharded_fields(reader.metadata(), shard, &s);
    const int64_t rank = meta_integer(reader.metadata(), "rank", "rank", 0, INT_MAX, shard);
    TIDE_CHECK(rank == r && s.world_size == world, "{}: '{}' was written by rank {} of {}", subject,
               path, rank, s.world_size);
    if (r == 0) {
      meta = reader.metadata();
      meta.erase("rank");
      meta.erase("pieces");
    } else {
      TIDE_CHECK(same_model_shape(s.info.config, checkpoint_info_from_meta(meta, shard).config) &&
                     s.info.step == meta["step"].get<int64_t>() &&
                     s.info.optimizer_state == meta["optimizer_state"].get<bool>() &&
                     reader.metadata()["compute_dtype"] == meta["compute_dtype"],
                 "{}: rank {}'s shard holds step {} of a {} model, unlike rank 0's; the ranks "
                 "saved different states",
                 subject, r, s.info.step, s.info.config.str());
    }
    const json& pieces = meta_member(reader.metadata(), "pieces", "pieces", shard);
    for (const SafetensorsEntry& e : reader.entries()) {
      const auto p = pieces.find(e.name);
      TIDE_CHECK(p != pieces.end() && p->is_object() && p->contains("tensor") &&
                     p->contains("begin") && p->contains("end"),
                 "{}: '{}' holds '{}' without its piece metadata", subject, path,
                 printable_name(e.name));
      map[(*p)["tensor"].get<std::string>()].push_back(
          {{"file", name}, {"key", e.name}, {"begin", (*p)["begin"]}, {"end", (*p)["end"]}});
      total += e.nbytes;
    }
    files[name] = {{"checksum", reader.checksum()}, {"bytes", fs::file_size(path)}};
  }
  meta["total_size"] = total;
  json index = {{"metadata", meta}, {"files", files}, {"weight_map", map}};
  parse_index(index, target);  // the pieces tile every tensor: the save is complete

  // Leftovers of an earlier, failed save into the same folder (other world sizes, temporaries)
  // are not part of this checkpoint.
  std::set<std::string> keep;
  for (int r = 0; r < world; ++r) keep.insert(shard_file_name(r, world));
  for (const auto& e : fs::directory_iterator(partial))
    if (!keep.count(e.path().filename().string())) fs::remove_all(e.path(), ec);

  write_text_atomic((fs::path(partial) / kIndexName).string(), index.dump(1));
  sync_dir(partial);

  swap_into_place(partial, target, subject);
}

void swap_into_place(const std::string& fresh, const std::string& target,
                     const std::string& subject) {
  // Atomically when something is there (RENAME_EXCHANGE, which also swaps a file with a
  // folder), then remove the old one, now at `fresh`.
  std::error_code ec;
  const fs::path parent = fs::path(target).parent_path();
  if (!fs::exists(target, ec)) {
    TIDE_CHECK(::rename(fresh.c_str(), target.c_str()) == 0, "{}: renaming '{}' failed: {}",
               subject, fresh, errno_text());
  } else if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(fresh, ec);
  } else {
    // File systems without RENAME_EXCHANGE: move the old one aside first (a crash in between
    // leaves it at '<target>.old').
    const std::string old = target + ".old";
    fs::remove_all(old, ec);
    TIDE_CHECK(::rename(target.c_str(), old.c_str()) == 0,
               "{}: moving the old one aside failed: {}", subject, errno_text());
    TIDE_CHECK(::rename(fresh.c_str(), target.c_str()) == 0, "{}: renaming '{}' failed: {}",
               subject, fresh, errno_text());
    fs::remove_all(old, ec);
  }
  sync_dir(parent.empty() ? "." : parent.string());
}

// ---------------------------------------------------------------------------------------------

struct ShardedCheckpointReader::Impl {
  std::string dir;
  Index index;
  bool verify_data = true;
  std::vector<std::unique_ptr<SafetensorsReader>> shards;  // by rank, opened on demand

  Impl(const std::string& d, bool verify) : dir(d), index(read_index(d)), verify_data(verify) {
    shards.resize(index.info.world_size);
  }

  // Opens and checks shard r (once).
  const SafetensorsReader& shard(int r) {
    if (!shards[r]) {
      const std::string path = (fs::path(dir) / shard_file_name(r, index.info.world_size)).string();
      std::error_code ec;
      TIDE_CHECK(fs::exists(path, ec),
                 "{}: shard '{}' is missing; the checkpoint is incomplete, use another copy",
                 who(dir), path);
      auto reader = std::make_unique<SafetensorsReader>(path, kShardWhat, verify_data);
      check_shard(*reader, index, r);
      shards[r] = std::move(reader);
    }
    return *shards[r];
  }

  const std::vector<Piece>& pieces(const std::string& name) const {
    const auto it = index.map.find(name);
    TIDE_CHECK(it != index.map.end(), "{} has no tensor '{}'", who(dir), printable_name(name));
    return it->second;
  }

  // Calls f(piece, lo, hi) for each piece overlapping elements [begin, end) of `name`, with
  // the overlap [lo, hi).
  template <class F>
  void overlapping(const std::string& name, int64_t begin, int64_t end, F&& f) const {
    for (const Piece& p : pieces(name)) {
      const int64_t lo = std::max(begin, p.begin), hi = std::min(end, p.end);
      if (lo < hi) f(p, lo, hi);
    }
  }

  // Opens every shard elements [begin, end) of `name` are in.
  void prepare(const std::string& name, int64_t begin, int64_t end) {
    overlapping(name, begin, end, [&](const Piece& p, int64_t, int64_t) { shard(p.file); });
  }

  void read(const std::string& name, int64_t begin, int64_t end, void* dst) {
    const size_t esz = dtype_size(index.dtypes.at(name));
    overlapping(name, begin, end, [&](const Piece& p, int64_t lo, int64_t hi) {
      shard(p.file).read_bytes(p.key, static_cast<uint64_t>(lo - p.begin) * esz,
                               static_cast<uint64_t>(hi - lo) * esz,
                               static_cast<char*>(dst) + (lo - begin) * int64_t(esz));
    });
  }
};

ShardedCheckpointReader::ShardedCheckpointReader(const std::string& dir, bool verify_data,
                                                 bool open_all)
    : impl_(std::make_unique<Impl>(dir, verify_data)) {
  if (open_all)
    for (int r = 0; r < impl_->index.info.world_size; ++r) impl_->shard(r);
}

ShardedCheckpointReader::~ShardedCheckpointReader() = default;

const ShardedCheckpointInfo& ShardedCheckpointReader::info() const {
  return impl_->index.info;
}

bool ShardedCheckpointReader::contains(const std::string& name) const {
  return impl_->index.map.count(name) > 0;
}

DType ShardedCheckpointReader::dtype(const std::string& name) const {
  impl_->pieces(name);
  return impl_->index.dtypes.at(name);
}

int64_t ShardedCheckpointReader::numel(const std::string& name) const {
  return impl_->pieces(name).back().end;
}

void ShardedCheckpointReader::prepare(const std::string& name, int64_t begin, int64_t end) const {
  impl_->prepare(name, begin, end);
}

void ShardedCheckpointReader::read(const std::string& name, int64_t begin, int64_t end,
                                   void* dst) const {
  const std::vector<Piece>& pieces = impl_->pieces(name);
  TIDE_CHECK(0 <= begin && begin <= end && end <= pieces.back().end,
             "{}: elements [{}, {}) are outside tensor '{}' ({} elements)", who(impl_->dir), begin,
             end, name, pieces.back().end);
  impl_->read(name, begin, end, dst);
}

ShardedCheckpointInfo read_sharded_checkpoint_info(const std::string& dir, bool verify_data) {
  return ShardedCheckpointReader(dir, verify_data).info();
}

void load_into_store(const CheckpointSource& source, ChunkStore& store, const GPTConfig& config,
                     bool with_optimizer_state, const OpContext* copies) {
  const CheckpointInfo& x = source.info();
  const std::string w = fmt::format("checkpoint '{}'", source.path());
  TIDE_CHECK(same_model_shape(x.config, config),
             "{} holds a model {} but this model is {}; build the model with the checkpoint's "
             "shape",
             w, x.config.str(), config.str());
  check_stage_layout(store.layout(), config, w);
  // An f32 model without optimizer state (tide sample, init) takes 16-bit parameters too: the
  // master weights where the checkpoint holds them, else the parameters widened.
  const bool widens = !with_optimizer_state && store.compute_dtype() == DType::F32 &&
                      source.compute_dtype() != DType::F32;
  TIDE_CHECK(source.compute_dtype() == store.compute_dtype() || widens,
             "{} holds {} parameters but this model computes in {}; load it into a model of the "
             "checkpoint's compute dtype",
             w, dtype_name(source.compute_dtype()), dtype_name(store.compute_dtype()));
  TIDE_CHECK(!with_optimizer_state || x.optimizer_state,
             "{} was saved without optimizer state; it can initialise a run (init) but not "
             "resume one",
             w);
  TIDE_CHECK(
      !with_optimizer_state || (store.has(ChunkKind::ADAM_M) && store.has(ChunkKind::ADAM_V)),
      "cannot load the optimizer state of {}: the model was built without one", w);

  // What this store owns of each tensor: elements [lo, hi), copied to dst.
  struct Copy {
    std::string name;  // the tensor read: the item's, or its master weights when widening
    DType dtype;       // the source's dtype of it
    int64_t lo, hi;
    Tensor dst;  // in the store's dtype, on the chunk's device
  };
  const ChunkLayout& layout = store.layout();
  const std::vector<Item> items = items_of(layout, store.compute_dtype(), with_optimizer_state);
  std::vector<Copy> to_copy;
  for (const Item& it : items) {
    TIDE_CHECK(source.contains(it.name),
               "{} has no tensor '{}'; the checkpoint is damaged or not a {} model's", w, it.name,
               config.str());
    std::string name = it.name;
    if (widens && source.contains("master." + name)) name = "master." + name;
    TIDE_CHECK((source.dtype(name) == it.dtype || widens) && source.numel(it.name) == it.numel,
               "{}: tensor '{}' is {} x {} elements, but this model holds {} x {}", w, it.name,
               dtype_name(source.dtype(it.name)), source.numel(it.name), dtype_name(it.dtype),
               it.numel);
    const TensorSlot& s = layout.slot(it.id);
    const Chunk ch = store.owned(it.kind, s.chunk);
    TIDE_CHECK(ch.data != nullptr, "cannot load {}: {} chunk {} is not resident", w,
               chunk_kind_name(it.kind), s.chunk);
    const Device on = store.chunk(it.kind, s.chunk).device;
    TIDE_CHECK(on.is_cpu() || (copies != nullptr && copies->device == on),
               "cannot load {}: {} chunk {} is in {}'s memory and no context on that device was "
               "given to copy it there; pass the model's (GPT::op())",
               w, chunk_kind_name(it.kind), s.chunk, on.str());
    const int64_t lo = std::max(s.offset, ch.begin);
    const int64_t hi = std::min(s.offset + s.numel, ch.begin + ch.elems);
    if (lo >= hi) continue;
    char* dst = static_cast<char*>(ch.data) + (lo - ch.begin) * int64_t(dtype_size(ch.dtype));
    to_copy.push_back({name, source.dtype(name), lo - s.offset, hi - s.offset,
                       Tensor(dst, {hi - lo}, ch.dtype, on)});
  }
  // Every file the copies need is opened and checked before the first byte is copied.
  for (const Copy& c : to_copy) source.prepare(c.name, c.lo, c.hi);
  std::vector<std::byte> narrow;  // a piece read as it is stored, to be widened
  HostUpload upload;              // a device piece on its way there: one tensor at a time
  for (const Copy& c : to_copy) {
    void* into = upload.bytes_for(c.dst);
    if (c.dtype == DType::F32 || !widens) {
      source.read(c.name, c.lo, c.hi, into);
    } else {
      narrow.resize(static_cast<size_t>(c.hi - c.lo) * dtype_size(c.dtype));
      source.read(c.name, c.lo, c.hi, narrow.data());
      convert_elements(narrow.data(), c.dtype, into, DType::F32, c.hi - c.lo);
    }
    if (!c.dst.device.is_cpu()) upload.send(*copies, c.dst);
  }
}

void load_checkpoint_shard(const std::string& dir, ChunkStore& store, const GPTConfig& config,
                           bool with_optimizer_state) {
  // Anything else (a file, a folder without index.json) is refused with the index reader's words.
  if (!is_sharded_checkpoint(dir)) read_sharded_checkpoint_info(dir, /*verify_data=*/false);
  load_into_store(CheckpointSource(dir), store, config, with_optimizer_state);
}

}  // namespace tide
