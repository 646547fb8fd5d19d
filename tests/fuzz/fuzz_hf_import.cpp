// Fuzzes `tide import` (import_hf_gpt2, as apps/tide/import.cpp calls it): the input is a
// Hugging Face GPT-2 folder, config.json's length (u32 little-endian), config.json, then
// model.safetensors. A refused import must create nothing; an accepted one must write a
// checkpoint that reads back as the model it reported.
#include <filesystem>

#include "fuzz_util.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/checkpoint_meta.h"
#include "tide/checkpoint/hf_import.h"
#include "tide/model/layout.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide;
  static const std::string root = fuzz::scratch_path("hf_import");
  static const std::string hf = root + "/hf", out = root + "/out/model.ckpt";
  static const bool made = fs::create_directories(hf) || fs::is_directory(hf);
  if (!made) std::abort();
  const auto [config, model] =
      fuzz::split_prefixed(std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::write_file(hf + "/config.json", config);
  fuzz::write_file(hf + "/model.safetensors", model);
  std::error_code ec;
  fs::remove_all(root + "/out", ec);

  HfImportOptions o;
  o.overwrite = true;
  HfImportResult r;
  if (!fuzz::accepts([&] { r = import_hf_gpt2(hf, out, o); })) {
    if (fs::exists(root + "/out", ec)) std::abort();  // refused, but wrote something
    return 0;
  }
  const CheckpointInfo info = read_checkpoint_info(out);
  if (!same_model_shape(info.config, r.config) || info.optimizer_state ||
      r.tensors != make_layout(r.config).num_tensors())
    std::abort();  // the checkpoint is not the model the import reported
  return 0;
}
