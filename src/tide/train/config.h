#pragma once
// Training configuration: a JSON file with DeepSpeed's key names where DeepSpeed has one
// (train_micro_batch_size_per_gpu, optimizer.params.lr, gradient_clipping, bf16.enabled, ...)
// and tide's own keys otherwise (model.*, data.*, eval.*). Every key can be overridden from the
// command line as key=value (nested keys with dots: optimizer.params.lr=3e-4).
//
// The schema (config_schema()) lists every key with its type, default and one line of
// documentation; it drives parsing, validation, `tide train --list-keys` and docs/config.md.
// An unknown key, a value of the wrong type or an out-of-range value is an error naming the
// key and the fix (with a "did you mean" suggestion for misspelt keys).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tide/model/activations.h"
#include "tide/model/config.h"
#include "tide/optim/lr_schedule.h"
#include "tide/train/zero_settings.h"

namespace tide {

// UINT: a non-negative integer of up to 64 bits (seed). PATH: a string naming a file or
// directory that must exist when it is given (checked at parse time).
enum class ConfigType { INT, UINT, FLOAT, BOOL, STRING, PATH, FLOAT_PAIR };

// The legal values of a numeric key, checked before the value is narrowed to its field:
// [lo, hi] for INT; lo and hi (each open or closed) for FLOAT and each number of FLOAT_PAIR.
// Every bound is below 2^53, so it is exact as a double.
struct ConfigRange {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
};

struct ConfigKey {
  const char* path;  // dotted: "optimizer.params.lr"
  ConfigType type;
  nlohmann::json default_value;
  const char* doc;
  ConfigRange range = {};  // INT, FLOAT and FLOAT_PAIR only
};

const std::vector<ConfigKey>& config_schema();

struct TrainConfig {
  // batch and schedule
  int micro_batch = 8;
  int grad_accum = 1;
  int train_batch_size = 0;  // 0: not checked; else must equal micro * accum * dp
  int seq_len = 128;
  int64_t train_steps = 600;
  uint64_t seed = 1337;
  std::string device = "cpu";
  int threads = 0;
  // optimizer
  // Doubles, like PyTorch's Python floats: 1 - beta2 must be 0.05, not 1 - 0.95f.
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  LrSchedule lr_schedule;  // scheduler.*, resolved (total_num_steps 0 -> train_steps, ...)
  float grad_clip = 1.0f;  // 0: off
  bool bf16 = false, fp16 = false;
  ZeroSettings zero;  // zero_optimization.* (offload_optimizer: from offload_optimizer below)
  int64_t device_memory_limit = 0;          // placement.device_memory_limit: bytes, 0 = unlimited
  std::string placement_policy = "device";  // placement.policy: "device" or "auto"
  ActivationPolicy activation_policy = ActivationPolicy::SAVE_ALL;
  double chunk_size_mb = 0;  // 0: smallest legal chunk (the largest tensor)
  // What `tide estimate` sizes and `tide train` cannot run yet (offload, tensor parallelism
  // inside pipeline stages, SGD): parsed for both commands; the Trainer refuses what it cannot
  // honour (train/unsupported_settings.h).
  std::string optimizer_type = "AdamW";                            // "AdamW" or "SGD"
  std::string offload_optimizer = "none", offload_param = "none";  // "none" or "cpu"
  int world_size = 0;                                              // 0: as launched
  int tensor_parallel = 1, pipeline_stages = 1;
  bool sequence_parallel = false;
  // activation_checkpointing.partition_activations / cpu_checkpointing (ZeRO-R P_a).
  bool partition_activations = false, cpu_checkpointing = false;
  // pipeline.*: the schedule's canonical name (pipeline/generators.h; pipeline_setup.h checks
  // the combination), model chunks per stage, zb-auto's memory limit in M_B (0: 1F1B's peak).
  std::string pipeline_schedule = "1f1b";
  int virtual_stages = 1;
  double pipeline_memory_limit = 0;
  // model
  std::string model_preset;
  GPTConfig model;  // vocab_size 0 here means "from the data's tokenizer"
  // data
  std::string data_dir;  // with train.bin, val.bin, tokenizer.json, meta.json
  std::string train_data, val_data;
  bool shuffle = true;
  // evaluation, logging, output
  int64_t eval_interval = 100;
  int64_t eval_sequences = 128;  // the fixed validation set: the first N val sequences
  int64_t log_interval = 10;
  std::string out_dir = "runs/default";
  bool out_dir_overwrite = false;   // replace an earlier run's files in out_dir
  int64_t checkpoint_interval = 0;  // 0: only at the end
  std::string resume;               // checkpoint to resume from
  bool new_lr_schedule = false;     // a resume may change the checkpoint's lr schedule
  std::string init_from;            // checkpoint whose weights start the run (step 0)
  bool progress = true;
  double comm_timeout_s = 600;  // the collective watchdog (docs/reliability.md)
  bool is_default_run = false;  // no data given: the embedded default corpus

  // observability (docs/observability.md)
  bool tensorboard = false;      // tensorboard.enabled
  std::string tensorboard_path;  // tensorboard.output_path; "" = out_dir/tensorboard
  std::string tensorboard_job;   // tensorboard.job_name: a subdirectory; "" = none
  int64_t trace_steps = 0;       // trace.steps: steps traced after one warm-up; 0 = off
  std::string trace_path;        // trace.path; "" = out_dir/trace.json
  // Every schema key (dotted path -> value): merged, validated, defaults filled in, resolved
  // values where the typed fields resolve one (a preset's shape, total_num_steps 0, ...).
  // config.json, the checkpoints' config and the ranks' agreement check are written from it,
  // and parsing it back gives this config again.
  nlohmann::json values = nlohmann::json::object();

  bool operator==(const TrainConfig&) const = default;
};

// Merges `overrides` (key=value strings) into the JSON of `path` ("" = default_config()), validates
// everything against the schema and returns the typed config. Everything that can be checked
// without the data is checked here, before anything is prepared or written: unknown keys (all
// of them in one error), types, ranges (before narrowing), the optimizer and the LR schedule,
// the model shape, and that every path given exists.
// check_paths = false (`tide estimate`, which reads no data): the paths are not checked.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              bool check_paths = true);
// Same, from JSON already parsed (tests).
TrainConfig parse_train_config(const nlohmann::json& j, bool check_paths = true);

// The files of an earlier run in `out_dir` (metrics.jsonl, config.json, model.ckpt,
// model_step<N>.ckpt); empty when there are none.
std::vector<std::string> earlier_run_files(const std::string& out_dir);
// Refuses to start a run that would overwrite an earlier run's files in cfg.out_dir, unless it
// continues that run (checkpoint.resume) or cfg.out_dir_overwrite is set.
void check_out_dir(const TrainConfig& cfg);

// The config as nested JSON (every schema key, from c.values): config.json and the checkpoints'
// config. parse_train_config(config_to_json(c)) == c.
nlohmann::json config_to_json(const TrainConfig& c);

// Sets a key of c.values to a value a component resolved after parsing (the trainer: the
// vocabulary and the data paths), so that config.json records what the run used.
void set_resolved_value(TrainConfig& c, const std::string& key, const nlohmann::json& value);

// The config `tide train` reads when given no config file (the overrides apply on top): the
// scheduler params of the embedded default run. A config file is read as DeepSpeed reads it,
// with the schema's (DeepSpeed's) defaults, whose 1000 log-warmup steps would never end in the
// default 300 steps.
const nlohmann::json& default_config();

// Markdown table of the schema (docs/config.md is generated from it).
std::string config_reference_markdown();

}  // namespace tide
