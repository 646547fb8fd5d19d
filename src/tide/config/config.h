#pragma once
// Training configuration: a JSON file with DeepSpeed's key names where DeepSpeed has one
// (train_micro_batch_size_per_gpu, optimizer.params.lr, gradient_clipping, bf16.enabled, ...)
// and tide's own keys otherwise (model.*, data.*, eval.*). Every key can be overridden from the
// command line as key=value (nested keys with dots: optimizer.params.lr=3e-4).
//
// The schema (config_schema()) lists every key with the TrainConfig field it sets, its type,
// default and one line of documentation; it drives parsing, validation, config.json,
// `tide train --list-keys` and docs/config.md.
// An unknown key, a value of the wrong type or an out-of-range value is an error naming the
// key and the fix (with a "did you mean" suggestion for misspelt keys).

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "tide/core/dtype.h"
#include "tide/memory/zero_settings.h"
#include "tide/model/activations.h"
#include "tide/model/config.h"
#include "tide/optim/loss_scaler.h"
#include "tide/optim/lr_schedule.h"

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

// What tide does with a key. DeepSpeed's keys that tide cannot use are declared too, so that a
// DeepSpeed config runs as written instead of failing on them (docs/config.md, "Coming from
// DeepSpeed").
enum class KeyUse {
  HONOURED,  // the key changes the run (most keys)
  IGNORED,   // a DeepSpeed key that cannot change a tide run (timers, a collective's choice of
             // algorithm, ...): accepted, and named in one warning line (ignored_keys_warning)
  REFUSED,   // a DeepSpeed key that DeepSpeed itself refuses: an error whatever its value, with
             // `doc` as the reason and the fix
};

struct TrainConfig;

// What ConfigField is made from (below).
template <class M>
concept ConfigMember = std::is_member_object_pointer_v<M>;
template <class P>
concept ConfigNameParser = std::is_invocable_v<P, const std::string&>;
template <class S>
concept ConfigSetter = std::is_invocable_v<S, TrainConfig&, const nlohmann::json&>;

// Where a key's value goes in TrainConfig (ConfigKey::field), so that reading a plain key is the
// table's work: parse_checked sets every key that has a field, in table order, once the value's
// type and range are checked (the narrowing to the field's type is then exact). Made from
//  - a member path:            {&TrainConfig::zero, &ZeroSettings::stage}
//  - a parser and a path:      {parse_activation_policy, &TrainConfig::activation_policy}, for a
//                              string that names something (an enum, a checked name): the parser
//                              takes the string and throws the key's error for a bad one
//  - a setter:                 [](TrainConfig& c, const nlohmann::json& v) {...}, for the rest
//                              (one key, two fields; a key that only checks its value)
// Empty ({}): parse_checked reads the key itself (derived and deprecated keys), or nothing does
// (DeepSpeed's ignored and refused keys).
class ConfigField {
 public:
  ConfigField() = default;
  template <class F, ConfigMember... Ms>
  ConfigField(F TrainConfig::*m, Ms... ms)
      : set_([m, ms...](TrainConfig& c, const nlohmann::json& v) {
          auto& field = member(c.*m, ms...);
          field = v.get<std::remove_reference_t<decltype(field)>>();
        }) {}
  template <ConfigNameParser P, class F, ConfigMember... Ms>
  ConfigField(P parse, F TrainConfig::*m, Ms... ms)
      : set_([parse, m, ms...](TrainConfig& c, const nlohmann::json& v) {
          member(c.*m, ms...) = parse(v.get<std::string>());
        }) {}
  template <ConfigSetter S>
  ConfigField(S set) : set_(std::move(set)) {}

  explicit operator bool() const { return static_cast<bool>(set_); }
  // Sets c's field to `value` (a parser or setter may throw the key's error).
  void apply(TrainConfig& c, const nlohmann::json& value) const { set_(c, value); }

 private:
  template <class T>
  static T& member(T& object) {
    return object;
  }
  template <class T, class M, class... Ms>
  static auto& member(T& object, M T::*m, Ms... ms) {
    return member(object.*m, ms...);
  }
  std::function<void(TrainConfig&, const nlohmann::json&)> set_;
};

// One config key: everything about it is here (adding a key: docs/config.md, "Adding a key").
struct ConfigKey {
  const char* path;   // dotted: "optimizer.params.lr"
  ConfigField field;  // where its value goes in TrainConfig ({}: none, see ConfigField)
  ConfigType type;
  nlohmann::json default_value;
  const char* doc;
  ConfigRange range = {};  // INT, FLOAT and FLOAT_PAIR only
  KeyUse use = KeyUse::HONOURED;
};

const std::vector<ConfigKey>& config_schema();

struct TrainConfig {
  // batch and schedule
  // DeepSpeed's rule: train_batch_size = micro_batch * grad_accum * data-parallel ranks; a
  // config may give any two and the third is derived (resolve_batch in config.cpp).
  int micro_batch = 8;
  int grad_accum = 1;
  int train_batch_size = 0;  // as given; 0: not given (then micro * accum * dp)
  int seq_len = 128;
  int64_t train_steps = 600;
  uint64_t seed = 1337;
  std::string device = "cpu";
  int threads = 0;
  // optimizer
  // Doubles, like PyTorch's Python floats: 1 - beta2 must be 0.05, not 1 - 0.95f.
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  // false: classic Adam, the weight decay added to the gradient (DeepSpeed's "Adam" with
  // optimizer.params.adam_w_mode false); true: AdamW's decoupled decay.
  bool adam_w_mode = true;
  LrSchedule lr_schedule;  // scheduler.*, resolved (total_num_steps 0 -> train_steps, ...)
  float grad_clip = 1.0f;  // 0: off
  bool bf16 = false, fp16 = false;
  std::string grad_accum_dtype;         // data_types.grad_accum_dtype; empty: DeepSpeed's default
  std::string communication_data_type;  // empty: DeepSpeed's default (comm_dtype)
  Fp16LossScale fp16_loss_scale;        // fp16.*: DeepSpeed's loss scaling, with its defaults
  ZeroSettings zero;  // zero_optimization.* (offload_optimizer: from offload_optimizer below)
  int64_t device_memory_limit = 0;          // placement.device_memory_limit: bytes, 0 = unlimited
  std::string placement_policy = "device";  // placement.policy: "device" or "auto"
  // placement.pin_memory, zero_optimization.offload_param.pin_memory: page-locked host tiers on
  // a GPU (make_host_allocator).
  bool placement_pin_memory = false, offload_param_pin_memory = true;
  ActivationPolicy activation_policy = ActivationPolicy::SAVE_ALL;
  double chunk_size_mb = 0;  // 0: smallest legal chunk (the largest tensor)
  // What `tide estimate` sizes and `tide train` cannot run yet (offload, tensor parallelism
  // inside pipeline stages, SGD): parsed for both commands; the Trainer refuses what it cannot
  // honour (config/unsupported_settings.h).
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
  // The KeyUse::IGNORED keys the config gave, in schema order (config_to_json writes these and
  // no other ignored key, so that reading config.json back gives the same list).
  std::vector<std::string> ignored_keys;

  bool operator==(const TrainConfig&) const = default;
};

// Merges `overrides` (key=value strings) into the JSON of `path` ("" = default_config()), validates
// everything against the schema and returns the typed config. Everything that can be checked
// without the data is checked here, before anything is prepared or written: unknown keys (all
// of them in one error), types, ranges (before narrowing), the optimizer and the LR schedule,
// the model shape, the rules between keys (check_settings.h), and that every path given exists.
// check_paths = false (`tide estimate`, which reads no data): the paths are not checked.
// ranks: the processes of the run (tide train: the ranks launched), which with the
// tensor-parallel and pipeline sizes give the data-parallel ranks that derive a batch size the
// config leaves out (DeepSpeed's rule). 0 = not known here: the world_size key when set, else 1
// (tide estimate's world); the Trainer checks the batch again against the ranks it runs on.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              bool check_paths = true, int ranks = 0);
// Same, from JSON already parsed (tests).
TrainConfig parse_train_config(const nlohmann::json& j, bool check_paths = true, int ranks = 0);

// One warning line naming the KeyUse::IGNORED keys the config gave ("" when none): printed
// once by `tide train` (rank 0) and `tide estimate`.
std::string ignored_keys_warning(const TrainConfig& c);

// The files of an earlier run in `out_dir` (metrics.jsonl, config.json, model.ckpt,
// model_step<N>.ckpt); empty when there are none.
std::vector<std::string> earlier_run_files(const std::string& out_dir);
// Refuses to start a run that would overwrite an earlier run's files in cfg.out_dir, unless it
// continues that run (checkpoint.resume) or cfg.out_dir_overwrite is set.
void check_out_dir(const TrainConfig& cfg);

// The config as nested JSON (every schema key, from c.values, except the KeyUse::IGNORED keys
// the config did not give): config.json and the checkpoints' config.
// parse_train_config(config_to_json(c)) == c.
nlohmann::json config_to_json(const TrainConfig& c);

// Sets a key of c.values to a value a component resolved after parsing (the trainer: the
// vocabulary and the data paths), so that config.json records what the run used.
void set_resolved_value(TrainConfig& c, const std::string& key, const nlohmann::json& value);

// The config `tide train` reads when given no config file (the overrides apply on top): the
// scheduler params of the embedded default run. A config file is read as DeepSpeed reads it,
// with the schema's (DeepSpeed's) defaults, whose 1000 log-warmup steps would never end in the
// default 300 steps.
const nlohmann::json& default_config();

// The parameters' dtype (bf16.enabled, fp16.enabled) and the gradients' (grad_dtype: the
// data_types.grad_accum_dtype key, or DeepSpeed's default for it: default_grad_dtype,
// memory/zero_settings.h, which tide estimate applies per row).
DType model_dtype(const TrainConfig& c);
// Whether the run's ops and memory are on a device (cuda, sim): device is neither cpu nor
// auto (which is cpu until a GPU run has been checked).
bool on_device(const TrainConfig& c);
DType grad_dtype(const TrainConfig& c);
// The dtype the data-parallel gradient reductions send: the communication_data_type key, or
// DeepSpeed's default for it (default_comm_dtype: the parameters' dtype).
DType comm_dtype(const TrainConfig& c);
// The two keys' values where the config gives them; nullopt where DeepSpeed's default applies.
std::optional<DType> given_grad_dtype(const TrainConfig& c);
std::optional<DType> given_comm_dtype(const TrainConfig& c);
// zero_optimization.* as the policy stack takes it: c.zero with comm_dtype resolved.
ZeroSettings zero_settings(const TrainConfig& c);

// Markdown table of the schema (docs/config.md is generated from it).
std::string config_reference_markdown();

}  // namespace tide
