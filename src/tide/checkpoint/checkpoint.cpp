// Checkpoints as safetensors (see checkpoint.h). Everything read from the tide metadata is
// checked field by field (present, right type, in range) before it is used, and every tensor
// is checked against the model before the first byte is copied into it, so a refused load
// leaves the model as it was.
#include "tide/checkpoint/checkpoint.h"

#include <filesystem>
#include <unordered_map>

#include "tide/checkpoint/checkpoint_meta.h"
#include "tide/checkpoint/safetensors.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/checkpoint/tensor_to_write.h"

namespace tide {

using json = nlohmann::json;

namespace {

constexpr const char* kWhat = "checkpoint";

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
  for (const CheckpointKind& k : checkpoint_kinds(store.compute_dtype(), with_optimizer_state))
    add(k.kind, k.prefix);
  return items;
}

std::string who(const std::string& path) {
  return fmt::format("checkpoint '{}'", path);
}

// A sharded checkpoint (a directory) given where a file is expected gets its own message.
void check_not_sharded(const std::string& path) {
  TIDE_CHECK(!is_uncommitted_checkpoint(path), "{}", uncommitted_checkpoint_message(path));
  TIDE_CHECK(!is_sharded_checkpoint(path),
             "'{}' is a sharded checkpoint (a directory with an index.json), not a single-file "
             "checkpoint; load it with load_checkpoint_shard (sharded_checkpoint.h), or make one "
             "file of it with `tide export`",
             path);
}

// The checkpoint's info from its verified metadata, every field checked.
CheckpointInfo info_of(const SafetensorsReader& r) {
  return checkpoint_info_from_meta(r.metadata(), who(r.path()));
}

}  // namespace

void save_checkpoint(const std::string& path, const ChunkStore& store, const CheckpointInfo& info,
                     bool with_optimizer_state, const OpContext* copies) {
  TIDE_CHECK(
      !with_optimizer_state || (store.has(ChunkKind::ADAM_M) && store.has(ChunkKind::ADAM_V)),
      "cannot save the optimizer state to '{}': the model was built without one", path);
  const json meta = checkpoint_meta_json(info, with_optimizer_state);
  std::vector<SafetensorsTensor> tensors;
  const std::string subject = fmt::format("cannot write checkpoint '{}'", path);
  for (const Item& it : checkpoint_items(store, with_optimizer_state))
    tensors.push_back(tensor_to_write(it.name, store.tensor(it.kind, it.id), copies, subject));
  if (!is_sharded_checkpoint(path)) return write_safetensors(path, tensors, meta);
  // A sharded checkpoint there (an earlier run of this out_dir on another layout): the file is
  // written beside it and swapped in, so that one of the two is always there.
  const std::string beside = path + ".file";
  write_safetensors(beside, tensors, meta);
  swap_into_place(beside, path, fmt::format("cannot write checkpoint '{}'", path));
}

bool is_checkpoint_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  try {
    read_checkpoint_info(path);
    return true;
  } catch (const Error&) {
    return false;
  }
}

void save_checkpoint(const std::string& path, const GPT& model, const CheckpointInfo& info,
                     bool with_optimizer_state) {
  CheckpointInfo with_shape = info;
  with_shape.config = model.config();
  save_checkpoint(path, model.store(), with_shape, with_optimizer_state, &model.op());
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  check_not_sharded(path);
  return info_of(SafetensorsReader(path, kWhat));
}

void load_checkpoint(const std::string& path, ChunkStore& store, const GPTConfig& config,
                     bool with_optimizer_state) {
  check_not_sharded(path);
  const SafetensorsReader r(path, kWhat);
  const CheckpointInfo info = info_of(r);
  TIDE_CHECK(same_model_shape(info.config, config),
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
  // An f32 model without optimizer state (tide sample, init) takes 16-bit parameters too: the
  // master weights where the file holds them, else the parameters widened.
  const bool widens = !with_optimizer_state && store.compute_dtype() == DType::F32;
  for (const SafetensorsEntry& e : r.entries()) {
    const auto it = known.find(e.name);
    TIDE_CHECK(it != known.end(), "{} holds tensor '{}', which a {} model does not have", who(path),
               printable_name(e.name), config.str());
    const bool widened = widens && it->second.param && e.dtype != DType::I32;
    TIDE_CHECK(e.dtype == it->second.dtype || widened,
               "{}: tensor '{}' is {} but this model holds it in {}{}", who(path), e.name,
               dtype_name(e.dtype), dtype_name(it->second.dtype),
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
    const SafetensorsEntry& e = r.entry(it.name);
    if (e.dtype == t.dtype) {
      r.read(it.name, t.data, t.dtype, t.shape);
    } else if (r.contains("master." + it.name)) {
      r.read("master." + it.name, t.data, DType::F32, t.shape);
    } else {
      std::vector<std::byte> narrow(e.nbytes);
      r.read(it.name, narrow.data(), e.dtype, t.shape);
      convert_elements(narrow.data(), e.dtype, t.data, t.dtype, t.numel());
    }
  }
}

void load_checkpoint(const std::string& path, GPT& model, bool with_optimizer_state) {
  load_checkpoint(path, model.store(), model.config(), with_optimizer_state);
}

}  // namespace tide
