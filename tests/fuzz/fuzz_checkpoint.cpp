// Fuzzes the checkpoint reader: the input is a checkpoint file, read by read_checkpoint_info
// and loaded into a tiny model (parameters, then parameters and optimizer state). The
// checksum of inputs in tide's layout is recomputed first (fix_checksum), so mutations reach
// the checks behind it.
#include "fuzz_util.h"
#include "tide/checkpoint/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide;
  static const std::string path = fuzz::scratch_path("checkpoint");
  static GPT model(fuzz::tiny_model(), ActivationPolicy::SAVE_ALL);
  std::string bytes(reinterpret_cast<const char*>(data), size);
  fuzz::fix_checksum(bytes);
  fuzz::write_file(path, bytes);
  fuzz::accepts([&] { (void)read_checkpoint_info(path).config.str(); });
  fuzz::accepts([&] { load_checkpoint(path, model); });
  fuzz::accepts([&] { load_checkpoint(path, model, /*with_optimizer_state=*/true); });
  return 0;
}
