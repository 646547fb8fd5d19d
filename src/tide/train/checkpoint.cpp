// Checkpoints as safetensors (see checkpoint.h). Everything read from the tide metadata is
// checked field by field (present, right type, in range) before it is used, and every tensor
// is checked against the model before the first byte is copied into it, so a refused load
// leaves the model as it was.
#include "tide/train/checkpoint.h"

#include <climits>
#include <unordered_map>

#include "tide/train/safetensors.h"

namespace tide {

using json = nlohmann::json;

namespace {

constexpr const char* kWhat = "checkpoint";

json model_json(const GPTConfig& c) {
  return {{"n_layer", c.n_layer},       {"n_head", c.n_head},           {"n_embd", c.n_embd},
          {"vocab_size", c.vocab_size}, {"max_seq_len", c.max_seq_len}, {"dropout", c.dropout}};
}

bool same_shape(const GPTConfig& a, const GPTConfig& b) {
  return a.n_layer == b.n_layer && a.n_head == b.n_head && a.n_embd == b.n_embd &&
         a.vocab_size == b.vocab_size && a.max_seq_len == b.max_seq_len;
}

// One tensor of a checkpoint: its name and where it lives in the store.
struct Item {
  std::string name;
  ChunkKind kind;
  int id;
};

// The tensors a checkpoint of `store` holds, in file order: the parameters, then (with the
// optimizer state) the master weights when they are not the parameters, Adam's m and v.
std::vector<Item> checkpoint_items(const ChunkStore& store, bool with_optimizer_state) {
  const auto& slots = store.layout().slots();
  std::vector<Item> items;
  auto add = [&](ChunkKind kind, const std::string& prefix) {
    for (int id = 0; id < static_cast<int>(slots.size()); ++id)
      items.push_back({prefix + slots[id].name, kind, id});
  };
  add(ChunkKind::PARAM, "");
  if (with_optimizer_state) {
    if (store.has(ChunkKind::MASTER) && store.compute_dtype() != DType::F32)
      add(ChunkKind::MASTER, "master.");
    add(ChunkKind::ADAM_M, "adam_m.");
    add(ChunkKind::ADAM_V, "adam_v.");
  }
  return items;
}

std::string who(const std::string& path) {
  return fmt::format("checkpoint '{}'", path);
}

// A required member of the tide metadata object `obj` ("model.n_layer" is named `label`).
const json& member(const json& obj, const char* key, const std::string& label,
                   const std::string& path) {
  const auto it = obj.find(key);
  TIDE_CHECK(it != obj.end(),
             "{} has no '{}' in its metadata; the file is damaged or was not written by tide",
             who(path), label);
  return *it;
}

int64_t integer(const json& obj, const char* key, const std::string& label, int64_t lo, int64_t hi,
                const std::string& path) {
  const json& v = member(obj, key, label, path);
  TIDE_CHECK(v.is_number_integer(), "{}: metadata '{}' is a JSON {}, not an integer", who(path),
             label, v.type_name());
  bool fits;
  if (v.is_number_unsigned()) {  // JSON's non-negative integers
    const uint64_t u = v.get<uint64_t>();
    fits = u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo;
  } else {
    fits = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  }
  TIDE_CHECK(fits, "{}: metadata '{}' is {}, outside [{}, {}]; the file is damaged", who(path),
             label, v.dump(), lo, hi);
  return v.get<int64_t>();
}

// The checkpoint's info from its verified metadata, every field checked.
CheckpointInfo info_of(const SafetensorsReader& r) {
  const std::string& path = r.path();
  const json& meta = r.metadata();
  TIDE_CHECK(meta.is_object(), "{}: its tide metadata is a JSON {}, not an object", who(path),
             meta.type_name());
  const json& m = member(meta, "model", "model", path);
  TIDE_CHECK(m.is_object(), "{}: metadata 'model' is a JSON {}, not an object", who(path),
             m.type_name());
  CheckpointInfo info;
  GPTConfig& c = info.config;
  c.n_layer = static_cast<int>(integer(m, "n_layer", "model.n_layer", 1, INT_MAX, path));
  c.n_head = static_cast<int>(integer(m, "n_head", "model.n_head", 1, INT_MAX, path));
  c.n_embd = static_cast<int>(integer(m, "n_embd", "model.n_embd", 1, INT_MAX, path));
  c.vocab_size = static_cast<int>(integer(m, "vocab_size", "model.vocab_size", 1, INT_MAX, path));
  c.max_seq_len =
      static_cast<int>(integer(m, "max_seq_len", "model.max_seq_len", 1, INT_MAX, path));
  const json& dropout = member(m, "dropout", "model.dropout", path);
  TIDE_CHECK(dropout.is_number(), "{}: metadata 'model.dropout' is a JSON {}, not a number",
             who(path), dropout.type_name());
  c.dropout = dropout.get<float>();
  try {
    c.validate();
  } catch (const Error& e) {
    TIDE_FAIL("{} holds an impossible model shape: {}", who(path), e.what());
  }
  info.step = integer(meta, "step", "step", 0, INT64_MAX, path);
  const json& tokenizer = member(meta, "tokenizer", "tokenizer", path);
  TIDE_CHECK(tokenizer.is_string(), "{}: metadata 'tokenizer' is a JSON {}, not a string",
             who(path), tokenizer.type_name());
  info.tokenizer = tokenizer.get<std::string>();
  info.extra = member(meta, "extra", "extra", path);
  const json& opt = member(meta, "optimizer_state", "optimizer_state", path);
  TIDE_CHECK(opt.is_boolean(), "{}: metadata 'optimizer_state' is a JSON {}, not a boolean",
             who(path), opt.type_name());
  info.optimizer_state = opt.get<bool>();
  return info;
}

}  // namespace

void save_checkpoint(const std::string& path, const ChunkStore& store, const CheckpointInfo& info,
                     bool with_optimizer_state) {
  TIDE_CHECK(
      !with_optimizer_state || (store.has(ChunkKind::ADAM_M) && store.has(ChunkKind::ADAM_V)),
      "cannot save the optimizer state to '{}': the model was built without one", path);
  const json meta = {{"model", model_json(info.config)},
                     {"step", info.step},
                     {"tokenizer", info.tokenizer},
                     {"extra", info.extra},
                     {"optimizer_state", with_optimizer_state}};
  std::vector<SafetensorsTensor> tensors;
  for (const Item& it : checkpoint_items(store, with_optimizer_state)) {
    const Tensor t = store.tensor(it.kind, it.id);
    tensors.push_back({it.name, t.dtype, t.shape, t.data});
  }
  write_safetensors(path, tensors, meta);
}

void save_checkpoint(const std::string& path, const GPT& model, const CheckpointInfo& info,
                     bool with_optimizer_state) {
  CheckpointInfo with_shape = info;
  with_shape.config = model.config();
  save_checkpoint(path, model.store(), with_shape, with_optimizer_state);
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  return info_of(SafetensorsReader(path, kWhat));
}

void load_checkpoint(const std::string& path, ChunkStore& store, const GPTConfig& config,
                     bool with_optimizer_state) {
  const SafetensorsReader r(path, kWhat);
  const CheckpointInfo info = info_of(r);
  TIDE_CHECK(same_shape(info.config, config),
             "{} holds a model {} but this model is {}; build the model with the checkpoint's "
             "shape (read_checkpoint_info)",
             who(path), info.config.str(), config.str());
  TIDE_CHECK(!with_optimizer_state || info.optimizer_state,
             "{} was saved without optimizer state; it can initialise a run (init) but not "
             "resume one",
             who(path));
  TIDE_CHECK(
      !with_optimizer_state || (store.has(ChunkKind::ADAM_M) && store.has(ChunkKind::ADAM_V)),
      "cannot load the optimizer state of {}: the model was built without one", who(path));

  // Every tensor of the file must be one of this model (with the optimizer state when the
  // file holds it, whatever this load takes), with the model's dtype and shape...
  struct Expected {
    DType dtype;
    Shape shape;
    bool param;
  };
  std::unordered_map<std::string, Expected> known;
  for (const TensorSlot& s : store.layout().slots()) {
    known.emplace(s.name, Expected{store.compute_dtype(), s.shape, true});
    if (info.optimizer_state)
      for (const char* prefix : {"master.", "adam_m.", "adam_v."})
        known.emplace(prefix + s.name, Expected{DType::F32, s.shape, false});
  }
  for (const SafetensorsEntry& e : r.entries()) {
    const auto it = known.find(e.name);
    TIDE_CHECK(it != known.end(), "{} holds tensor '{}', which a {} model does not have", who(path),
               printable_name(e.name), config.str());
    TIDE_CHECK(e.dtype == it->second.dtype, "{}: tensor '{}' is {} but this model holds it in {}{}",
               who(path), e.name, dtype_name(e.dtype), dtype_name(it->second.dtype),
               it->second.param ? "; load it into a model of the checkpoint's compute dtype" : "");
    TIDE_CHECK(e.shape == it->second.shape, "{}: tensor '{}' has shape {} but the model's is {}",
               who(path), e.name, e.shape.str(), it->second.shape.str());
  }
  // ...and every tensor this load needs must be there. All is checked before any is copied.
  const std::vector<Item> items = checkpoint_items(store, with_optimizer_state);
  for (const Item& it : items)
    TIDE_CHECK(r.contains(it.name),
               "{} has no tensor '{}'; the file is damaged or was not written by tide", who(path),
               it.name);
  for (const Item& it : items) {
    const Tensor t = store.tensor(it.kind, it.id);
    r.read(it.name, t.data, t.dtype, t.shape);
  }
}

void load_checkpoint(const std::string& path, GPT& model, bool with_optimizer_state) {
  load_checkpoint(path, model.store(), model.config(), with_optimizer_state);
}

}  // namespace tide
