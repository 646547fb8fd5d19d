#include "tide/estimate/setup_json.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "tide/core/error.h"
#include "tide/core/json_error.h"

namespace tide {
namespace {

// The value at a dotted path ("zero_optimization.offload_optimizer.device"), or nullptr.
const nlohmann::json* find(const nlohmann::json& j, const std::string& dotted) {
  const nlohmann::json* node = &j;
  std::stringstream parts(dotted);
  std::string key;
  while (std::getline(parts, key, '.')) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

template <typename T>
void read(const nlohmann::json& j, const std::string& key, T& out) {
  const nlohmann::json* v = find(j, key);
  if (!v || v->is_null()) return;
  if constexpr (std::is_same_v<T, bool>) {
    TIDE_CHECK(v->is_boolean(), "config key '{}' must be true or false (got {})", key, v->dump());
  } else if constexpr (std::is_floating_point_v<T>) {
    TIDE_CHECK(v->is_number(), "config key '{}' must be a number (got {})", key, v->dump());
  } else if constexpr (std::is_integral_v<T>) {
    // Checked before narrowing: 4294967300 must not become 4.
    TIDE_CHECK(v->is_number_integer(), "config key '{}' must be an integer (got {})", key,
               v->dump());
    const bool fits =
        v->is_number_unsigned()
            ? v->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
            : v->is_number_integer() &&
                  v->get<int64_t>() >= int64_t{std::numeric_limits<T>::min()} &&
                  v->get<int64_t>() <= int64_t{std::numeric_limits<T>::max()};
    TIDE_CHECK(fits, "config key '{}' must be an integer in [{}, {}] (got {})", key,
               std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), v->dump());
  } else {
    TIDE_CHECK(v->is_string(), "config key '{}' must be a string (got {})", key, v->dump());
  }
  out = v->get<T>();
}

std::optional<std::string> read_string(const nlohmann::json& j, const std::string& key) {
  if (!find(j, key)) return std::nullopt;
  std::string out;
  read(j, key, out);
  return out;
}

// DeepSpeed's offload device: "cpu" moves the states to the host, "none" keeps them ("nvme"
// is DeepSpeed's ZeRO-Infinity, which tide does not have).
bool read_offload_device(const nlohmann::json& j, const std::string& key) {
  std::string device = "none";
  read(j, key, device);
  TIDE_CHECK(device == "cpu" || device == "none",
             "config key '{}' must be \"cpu\" or \"none\" (got \"{}\")", key, device);
  return device == "cpu";
}

}  // namespace

TrainSetup setup_from_json(const nlohmann::json& config, TrainSetup base) {
  TIDE_CHECK(config.is_object(), "the config must be a JSON object (got {})",
             std::string(config.type_name()));
  TrainSetup s = base;
  std::string preset;
  read(config, "model.preset", preset);
  if (!preset.empty()) s.model = GPTConfig::preset(preset);
  read(config, "model.n_layer", s.model.n_layer);
  read(config, "model.n_head", s.model.n_head);
  read(config, "model.n_embd", s.model.n_embd);
  read(config, "model.vocab_size", s.model.vocab_size);
  read(config, "model.max_seq_len", s.model.max_seq_len);
  // As tide train reads them: seq_len is the training sequence length, and without a preset
  // the positions (model.max_seq_len) default to it when absent or 0.
  read(config, "seq_len", s.seq_len);
  if (preset.empty() && s.seq_len > 0) {
    const nlohmann::json* max_seq = find(config, "model.max_seq_len");
    if (!max_seq || max_seq->is_null() || s.model.max_seq_len == 0) s.model.max_seq_len = s.seq_len;
  }

  read(config, "world_size", s.world_size);
  read(config, "parallel.tp", s.tp);
  read(config, "parallel.pp", s.pp);
  read(config, "parallel.sp", s.sp);
  read(config, "train_micro_batch_size_per_gpu", s.micro_batch);
  read(config, "gradient_accumulation_steps", s.grad_accum);
  read(config, "zero_optimization.stage", s.zero_stage);
  // The buffer sizes and thresholds that set how many communication buffers ZeRO holds.
  read(config, "zero_optimization.reduce_bucket_size", s.zero.reduce_bucket_size);
  read(config, "zero_optimization.allgather_bucket_size", s.zero.allgather_bucket_size);
  read(config, "zero_optimization.overlap_comm", s.zero.overlap_comm);
  read(config, "zero_optimization.stage3_prefetch_bucket_size", s.zero.prefetch_bucket_size);
  read(config, "zero_optimization.stage3_max_live_parameters", s.zero.max_live_parameters);
  read(config, "zero_optimization.stage3_param_persistence_threshold",
       s.zero.param_persistence_threshold);
  const bool off_opt = read_offload_device(config, "zero_optimization.offload_optimizer.device");
  const bool off_param = read_offload_device(config, "zero_optimization.offload_param.device");
  TIDE_CHECK(!off_param || off_opt,
             "zero_optimization.offload_param.device is \"cpu\" but offload_optimizer is not; "
             "offloading the parameters needs the optimizer on the host too, so set "
             "zero_optimization.offload_optimizer.device to \"cpu\"");
  if (find(config, "zero_optimization.offload_optimizer.device") ||
      find(config, "zero_optimization.offload_param.device"))
    s.offload = off_param ? Offload::All : off_opt ? Offload::Optimizer : Offload::None;

  bool bf16 = false, fp16 = false;
  read(config, "bf16.enabled", bf16);
  read(config, "fp16.enabled", fp16);
  TIDE_CHECK(!(bf16 && fp16), "bf16.enabled and fp16.enabled are both true; enable one");
  s.precision = bf16 ? Precision::BF16 : fp16 ? Precision::FP16 : Precision::FP32;

  if (auto t = read_string(config, "optimizer.type")) s.optimizer = parse_optimizer(*t);
  if (auto t = read_string(config, "activation_checkpointing.policy"))
    s.recompute = parse_recompute(*t);
  if (auto t = read_string(config, "pipeline.schedule")) s.schedule = parse_schedule(*t);
  read(config, "pipeline.virtual_stages", s.virtual_stages);
  read(config, "chunk_size_mb", s.chunk_mib);
  return s;
}

TrainSetup read_setup_file(const std::string& path, TrainSetup base) {
  std::error_code ec;
  TIDE_CHECK(!std::filesystem::is_directory(path, ec),
             "config file '{}' is a directory; pass a JSON file such as run.json", path);
  std::ifstream in(path);
  TIDE_CHECK(in.good(), "cannot open config file '{}'; check the path", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in, nullptr, true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    TIDE_FAIL("config file '{}' is not valid JSON: {}", path, json_error_text(e));
  } catch (const std::exception& e) {
    TIDE_FAIL("cannot read config file '{}' ({}); check that it is a readable file", path,
              e.what());
  }
  return setup_from_json(j, base);
}

}  // namespace tide
