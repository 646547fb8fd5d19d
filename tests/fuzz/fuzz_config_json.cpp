// Fuzzes the training config parser: the input is the text of a config file, read by
// load_train_config (file + JSON parse + schema validation) and, when it is JSON, by
// parse_train_config directly; an accepted config must survive config_to_json.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "tide/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const std::string path = fuzz::scratch_path("config_json");
  fuzz::write_file(path, text);
  fuzz::accepts([&] { (void)config_to_json(load_train_config(path, {})); });
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded()) fuzz::accepts([&] { (void)config_to_json(parse_train_config(j)); });
  return 0;
}
