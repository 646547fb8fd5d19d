#include "tide/train/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>

namespace tide {

using json = nlohmann::json;

namespace {
constexpr char kMagic[8] = {'T', 'I', 'D', 'E', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;

json model_json(const GPTConfig& c) {
  return {{"n_layer", c.n_layer},       {"n_head", c.n_head},           {"n_embd", c.n_embd},
          {"vocab_size", c.vocab_size}, {"max_seq_len", c.max_seq_len}, {"dropout", c.dropout}};
}

// Reads magic, version and header; leaves `f` at the start of the tensor data.
json read_header(std::ifstream& f, const std::string& path) {
  TIDE_CHECK(f.good(), "cannot open checkpoint '{}'; check the path", path);
  char magic[8] = {};
  uint32_t version = 0;
  uint64_t len = 0;
  f.read(magic, 8);
  TIDE_CHECK(f.good() && std::memcmp(magic, kMagic, 8) == 0,
             "'{}' is not a tide checkpoint (bad magic); pass a file written by `tide train`",
             path);
  f.read(reinterpret_cast<char*>(&version), 4);
  TIDE_CHECK(f.good() && version == kVersion,
             "checkpoint '{}' has format version {}, this tide reads version {}", path, version,
             kVersion);
  f.read(reinterpret_cast<char*>(&len), 8);
  TIDE_CHECK(f.good() && len < (64u << 20), "checkpoint '{}' is corrupt (header length {})", path,
             len);
  std::string text(len, '\0');
  f.read(text.data(), static_cast<std::streamsize>(len));
  TIDE_CHECK(f.good(), "checkpoint '{}' is truncated inside its header", path);
  json h = json::parse(text, nullptr, false);
  TIDE_CHECK(!h.is_discarded() && h.contains("tensors") && h.contains("model"),
             "checkpoint '{}' is corrupt (unreadable header)", path);
  return h;
}
}  // namespace

void save_checkpoint(const std::string& path, const GPT& model, const CheckpointInfo& info,
                     bool) {
  const ChunkStore& store = model.store();
  const ChunkLayout& lay = store.layout();
  json h;
  h["model"] = model_json(model.config());
  h["step"] = info.step;
  h["tokenizer"] = info.tokenizer;
  h["extra"] = info.extra;
  h["tensors"] = json::array();
  for (const TensorSlot& s : lay.slots()) {
    json shape = json::array();
    for (int d = 0; d < s.shape.ndim; ++d) shape.push_back(s.shape[d]);
    h["tensors"].push_back({{"name", s.name}, {"shape", shape}});
  }
  const std::string text = h.dump();
  const std::string tmp = path + ".tmp";
  if (auto dir = std::filesystem::path(path).parent_path(); !dir.empty())
    std::filesystem::create_directories(dir);
  {
    std::ofstream f(tmp, std::ios::binary);
    TIDE_CHECK(f.good(), "cannot write checkpoint '{}'; check the directory exists and is writable",
               tmp);
    const uint64_t len = text.size();
    f.write(kMagic, 8);
    f.write(reinterpret_cast<const char*>(&kVersion), 4);
    f.write(reinterpret_cast<const char*>(&len), 8);
    f.write(text.data(), static_cast<std::streamsize>(len));
    uint64_t sum = kFnvBasis;
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const Tensor t = store.tensor(ChunkKind::PARAM, id);
      f.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.nbytes()));
      sum = fnv1a(sum, t.data, t.nbytes());
    }
    f.write(reinterpret_cast<const char*>(&sum), 8);
    TIDE_CHECK(f.good(), "writing checkpoint '{}' failed (disk full?)", tmp);
  }
  std::filesystem::rename(tmp, path);
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const json h = read_header(f, path);
  CheckpointInfo info;
  const json& m = h["model"];
  info.config.n_layer = m["n_layer"];
  info.config.n_head = m["n_head"];
  info.config.n_embd = m["n_embd"];
  info.config.vocab_size = m["vocab_size"];
  info.config.max_seq_len = m["max_seq_len"];
  info.config.dropout = m["dropout"];
  info.step = h.value("step", int64_t{0});
  info.tokenizer = h.value("tokenizer", std::string());
  info.extra = h.value("extra", json::object());
  return info;
}

void load_checkpoint(const std::string& path, GPT& model, bool) {
  std::ifstream f(path, std::ios::binary);
  const json h = read_header(f, path);
  const ChunkLayout& lay = model.store().layout();
  const json& tensors = h["tensors"];
  TIDE_CHECK(static_cast<int>(tensors.size()) == lay.num_tensors(),
             "checkpoint '{}' has {} tensors but the model has {}; the model shape differs", path,
             tensors.size(), lay.num_tensors());
  uint64_t sum = kFnvBasis;
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const TensorSlot& s = lay.slot(id);
    const std::string name = tensors[id]["name"];
    Shape shape;
    for (const auto& d : tensors[id]["shape"]) shape.dims[shape.ndim++] = d.get<int64_t>();
    TIDE_CHECK(name == s.name && shape == s.shape,
               "checkpoint '{}' holds '{}' {} where the model has '{}' {}; the model shape "
               "differs from the checkpoint's",
               path, name, shape.str(), s.name, s.shape.str());
    Tensor t = model.store().tensor(ChunkKind::PARAM, id);
    f.read(static_cast<char*>(t.data), static_cast<std::streamsize>(t.nbytes()));
    TIDE_CHECK(f.good(), "checkpoint '{}' is truncated (inside tensor '{}')", path, name);
    sum = fnv1a(sum, t.data, t.nbytes());
  }
  uint64_t stored = 0;
  f.read(reinterpret_cast<char*>(&stored), 8);
  TIDE_CHECK(f.good(), "checkpoint '{}' is truncated (no checksum)", path);
  TIDE_CHECK(stored == sum, "checkpoint '{}' is corrupt: checksum mismatch", path);
}

}  // namespace tide
