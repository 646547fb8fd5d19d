// Fuzzes the key=value overrides of `tide train`: the input's first line is the config file
// (none when empty), every further line one override, as load_train_config gets them from the
// command line.
#include "fuzz_util.h"
#include "tide/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const std::string path = fuzz::scratch_path("config_overrides");
  const size_t nl = text.find('\n');
  const std::string_view file = text.substr(0, nl);
  std::vector<std::string> overrides;
  if (nl != std::string_view::npos) {
    for (size_t at = nl + 1; at <= text.size();) {
      size_t end = text.find('\n', at);
      if (end == std::string_view::npos) end = text.size();
      overrides.emplace_back(text.substr(at, end - at));
      at = end + 1;
    }
  }
  if (!file.empty()) fuzz::write_file(path, file);
  fuzz::accepts(
      [&] { (void)config_to_json(load_train_config(file.empty() ? "" : path, overrides)); });
  return 0;
}
