// init_from (see init_from.h): the parameters a rank holds, read from a checkpoint.
#include "tide/checkpoint/init_from.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/checkpoint_meta.h"
#include "tide/checkpoint/hf_import.h"
#include "tide/checkpoint/safetensors.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/core/dtype.h"
#include "tide/kernels/host_upload.h"

namespace tide {

namespace fs = std::filesystem;

bool is_hf_model_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec) &&
         !is_sharded_checkpoint(path);
}

GPTConfig init_from_model(const std::string& path) {
  GPTConfig c;
  if (is_hf_model_folder(path)) {
    // A run's out_dir has a config.json too (tide's own) beside its checkpoints.
    std::error_code ec;
    const fs::path p(path);
    TIDE_CHECK(!fs::exists(p / "model.ckpt", ec) || fs::exists(p / "model.safetensors", ec) ||
                   fs::exists(p / "model.safetensors.index.json", ec),
               "'{}' is a tide run's directory, not a Hugging Face model folder; name one of its "
               "checkpoints, e.g. {}",
               path, (p / "model.ckpt").string());
    c = hf_folder_model(path);
  } else if (is_sharded_checkpoint(path)) {
    c = read_sharded_checkpoint_info(path, /*verify_data=*/false).info.config;
  } else {  // the header: the checksum is verified when the weights are read
    const SafetensorsReader r(path, "checkpoint", /*verify_checksum=*/false);
    c = checkpoint_info_from_meta(r.metadata(), fmt::format("checkpoint '{}'", path)).config;
  }
  c.dropout = 0.0f;
  return c;
}

InitFromCheckpoint::InitFromCheckpoint(const std::string& path) : path_(path) {
  if (!is_hf_model_folder(path)) return;
  std::string tmpl = (fs::temp_directory_path() / "tide_init_from_XXXXXX").string();
  TIDE_CHECK(::mkdtemp(tmpl.data()) != nullptr,
             "init_from: cannot create a temporary directory under {} to import '{}' into; free "
             "space there (or set TMPDIR), or `tide import` the folder and init_from the file",
             fs::temp_directory_path().string(), path);
  temp_dir_ = tmpl;
  path_ = (fs::path(temp_dir_) / "model.ckpt").string();
  try {
    import_hf_gpt2(path, path_);
  } catch (const Error& e) {
    std::error_code ec;
    fs::remove_all(temp_dir_, ec);
    TIDE_FAIL("init_from: {}", e.what());
  }
}

InitFromCheckpoint::~InitFromCheckpoint() {
  std::error_code ec;  // best effort: a leftover temporary file is no reason to fail a run
  if (!temp_dir_.empty()) fs::remove_all(temp_dir_, ec);
}

namespace {

CheckpointInfo info_of(const std::string& path) {
  return is_sharded_checkpoint(path) ? read_sharded_checkpoint_info(path).info
                                     : read_checkpoint_info(path);
}

}  // namespace

void check_init_from(const std::string& path, const GPTConfig& config) {
  const CheckpointInfo info = info_of(path);
  TIDE_CHECK(same_model_shape(info.config, config),
             "init_from: checkpoint '{}' holds a model {} but this config's model is {} ({}); "
             "set model.* to the checkpoint's shape",
             path, info.config.str(), config.str(), model_shape_differences(info.config, config));
}

void init_weights_from(const std::string& path, GPT& model) {
  ChunkStore& store = model.store();
  // A 16-bit model also holds f32 master weights of its own: both are written (PARAM rounded).
  const bool own_master = store.has(ChunkKind::MASTER) && store.compute_dtype() != DType::F32;
  if (is_sharded_checkpoint(path)) {
    TIDE_CHECK(store.compute_dtype() == DType::F32,
               "init_from: '{}' is a sharded checkpoint, which initialises f32 runs only so far; "
               "for this {} run make one file of it (`tide export --checkpoint DIR --out-dir HF`, "
               "then `tide import --hf-dir HF --out FILE`) and init_from that file",
               path, dtype_name(store.compute_dtype()));
    check_init_from(path, model.config());
    load_into_store(CheckpointSource(path), store, model.config(), /*with_optimizer_state=*/false,
                    &model.op());
    return;
  }
  const SafetensorsReader r(path, "checkpoint");  // verifies the checksum
  const CheckpointInfo info =
      checkpoint_info_from_meta(r.metadata(), fmt::format("checkpoint '{}'", path));
  TIDE_CHECK(same_model_shape(info.config, model.config()),
             "init_from: checkpoint '{}' holds a model {} but this config's model is {} ({}); "
             "set model.* to the checkpoint's shape",
             path, info.config.str(), model.config().str(),
             model_shape_differences(info.config, model.config()));
  const ChunkLayout& lay = store.layout();
  // The tensor read for each slot, checked before any is copied.
  std::vector<const SafetensorsEntry*> src;
  for (const TensorSlot& s : lay.slots()) {
    // A pipeline's last stage holds lm_head.weight, its copy of the tied wte: read wte.
    const std::string base = s.name == "lm_head.weight" ? "wte" : s.name;
    const std::string name = r.contains("master." + base) ? "master." + base : base;
    TIDE_CHECK(r.contains(name), "init_from: checkpoint '{}' has no tensor '{}'; it is damaged",
               path, base);
    const SafetensorsEntry& e = r.entry(name);
    TIDE_CHECK(e.shape == s.shape, "init_from: checkpoint '{}': tensor '{}' has shape {} but {}",
               path, name, e.shape.str(), s.shape.str());
    TIDE_CHECK(e.dtype == DType::F32 || e.dtype == DType::BF16 || e.dtype == DType::F16,
               "init_from: checkpoint '{}': tensor '{}' is {}, not a float type", path, name,
               dtype_name(e.dtype));
    src.push_back(&e);
  }
  std::vector<ChunkKind> kinds = {ChunkKind::PARAM};
  if (own_master) kinds.push_back(ChunkKind::MASTER);
  std::vector<std::byte> raw;  // a piece read as it is stored, to be converted
  HostUpload upload;           // a device piece on its way there: one tensor at a time
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const TensorSlot& s = lay.slot(id);
    const SafetensorsEntry& e = *src[id];
    for (ChunkKind kind : kinds) {
      const Chunk ch = store.owned(kind, s.chunk);
      TIDE_CHECK(ch.data != nullptr, "init_from: cannot load '{}': its chunk is not resident",
                 s.name);
      // The elements [lo, hi) of the tensor this rank holds (all, or its ZeRO slice's part).
      const int64_t lo = std::clamp<int64_t>(ch.begin - s.offset, 0, s.numel);
      const int64_t hi = std::clamp<int64_t>(ch.begin + ch.elems - s.offset, lo, s.numel);
      if (hi == lo) continue;
      const int64_t n = hi - lo;
      const size_t es = dtype_size(e.dtype);
      char* at = static_cast<char*>(ch.data) + (s.offset + lo - ch.begin) * dtype_size(ch.dtype);
      const Tensor dst(at, {n}, ch.dtype, store.chunk(kind, s.chunk).device);
      void* into = upload.bytes_for(dst);
      if (e.dtype == ch.dtype) {  // straight into the chunk (or its staging)
        r.read_bytes(e.name, static_cast<uint64_t>(lo) * es, static_cast<size_t>(n) * es, into);
      } else {  // converted through f32 (a 16-bit PARAM rounded once)
        raw.resize(static_cast<size_t>(n) * es);
        r.read_bytes(e.name, static_cast<uint64_t>(lo) * es, raw.size(), raw.data());
        convert_elements(raw.data(), e.dtype, into, ch.dtype, n);
      }
      upload.send(model.op(), dst);
    }
  }
}

}  // namespace tide
