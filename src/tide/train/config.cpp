#include "tide/train/config.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "tide/core/error.h"
#include "tide/core/json_error.h"
#include "tide/estimate/train_setup.h"
#include "tide/optim/adamw.h"
#include "tide/optim/lr_schedule.h"
#include "tide/train/pipeline_setup.h"
#include "tide/train/sharded_checkpoint.h"
#include "tide/train/tensor_parallel_settings.h"

namespace tide {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// "No upper bound" for integer keys: any int64 (the fields of such keys are int64).
constexpr double kNoMax = 1e15;
// "No upper bound" for number keys: the largest float (every number key ends up in a float
// somewhere: the learning rate, the schedule, the clip threshold).
constexpr double kNumMax = 3.4028234663852886e38;

ConfigRange ints(double lo, double hi = kNoMax) {
  return {lo, hi, false, false};
}
ConfigRange nums(double lo, bool lo_open, double hi = kNumMax, bool hi_open = false) {
  return {lo, hi, lo_open, hi_open};
}

}  // namespace

const std::vector<ConfigKey>& config_schema() {
  using T = ConfigType;
  static const std::vector<ConfigKey> keys = {
      {"train_micro_batch_size_per_gpu", T::INT, 8, "sequences per micro-batch on each rank",
       ints(1, 65536)},
      {"gradient_accumulation_steps", T::INT, 1, "micro-batches accumulated per optimizer step",
       ints(1, 65536)},
      {"train_batch_size", T::INT, 0,
       "global batch in sequences; 0 = not checked, else must equal micro * accum * dp",
       ints(0, 2147483647)},
      {"seq_len", T::INT, 128, "tokens per sequence (at most model.max_seq_len)", ints(1, 1048576)},
      {"train_steps", T::INT, 600, "optimizer steps to run", ints(1)},
      {"seed", T::UINT, 1337, "seed of weight initialisation, data order and dropout"},
      {"device", T::STRING, "cpu", "cpu, cuda, cuda:N or auto"},
      {"threads", T::INT, 0, "OpenMP threads per rank; 0 = OpenMP's default", ints(0, 4096)},
      {"optimizer.type", T::STRING, "AdamW",
       "AdamW; SGD (no optimizer state) only for tide estimate: tide train refuses it"},
      {"optimizer.params.lr", T::FLOAT, 1e-3, "peak learning rate", nums(0, true)},
      {"optimizer.params.betas", T::FLOAT_PAIR, json::array({0.9, 0.95}), "Adam beta1, beta2",
       nums(0, false, 1, true)},
      {"optimizer.params.eps", T::FLOAT, 1e-8, "Adam epsilon", nums(0, true)},
      {"optimizer.params.weight_decay", T::FLOAT, 0.1,
       "decoupled weight decay (matrices and embeddings only)", nums(0, false)},
      {"scheduler.type", T::STRING, "WarmupCosineLR",
       "WarmupCosineLR, WarmupDecayLR or WarmupLR (DeepSpeed's formulas and defaults, see "
       "docs/optimizer.md), or none: constant optimizer.params.lr"},
      {"scheduler.params.warmup_min_lr", T::FLOAT, 0.0,
       "WarmupLR, WarmupDecayLR: lr at the start of the warmup", nums(0, false)},
      {"scheduler.params.warmup_max_lr", T::FLOAT, -1.0,
       "WarmupLR, WarmupDecayLR: lr at the end of the warmup; -1 = DeepSpeed's default: "
       "optimizer.params.lr for WarmupLR, 0.001 for WarmupDecayLR",
       nums(-1, false)},
      {"scheduler.params.warmup_num_steps", T::INT, 1000,
       "warmup steps (counted as at least 2, as in DeepSpeed); -1 (tide's, not DeepSpeed's) = "
       "10% of total_num_steps",
       ints(-1)},
      {"scheduler.params.warmup_type", T::STRING, "log",
       "log or linear: how the warmup rises (log: the first two steps at its start)"},
      {"scheduler.params.total_num_steps", T::INT, 0,
       "WarmupDecayLR, WarmupCosineLR: step where the decay reaches its end; 0 = train_steps",
       ints(0)},
      {"scheduler.params.cos_min_ratio", T::FLOAT, 0.0001,
       "WarmupCosineLR: floor of the cosine as a fraction of optimizer.params.lr",
       nums(0, false, 1, false)},
      {"scheduler.params.warmup_min_ratio", T::FLOAT, 0.0,
       "WarmupCosineLR: start of the warmup as a fraction of optimizer.params.lr",
       nums(0, false, 1, false)},
      {"gradient_clipping", T::FLOAT, 1.0, "clip the global gradient norm to this; 0 = off",
       nums(0, false)},
      {"bf16.enabled", T::BOOL, false, "bf16 compute (needs device=cuda)"},
      {"fp16.enabled", T::BOOL, false, "fp16 compute with dynamic loss scaling (needs cuda)"},
      {"zero_optimization.stage", T::INT, 0,
       "ZeRO stage: 0 = data parallel (DDP), 1 = partition optimizer states, 2 = + gradients, "
       "3 = + parameters (docs/zero.md)",
       ints(0, 3)},
      {"zero_optimization.reduce_bucket_size", T::INT, 500000000,
       "stages 1-3: gradient elements being reduce-scattered at once, in flight behind "
       "backward (a larger chunk is reduced alone, at once)",
       ints(1)},
      {"zero_optimization.allgather_bucket_size", T::INT, 500000000,
       "stages 1-2: parameter elements being all-gathered at once after the step (a larger "
       "chunk is gathered alone)",
       ints(1)},
      {"zero_optimization.overlap_comm", T::BOOL, true,
       "stages 1-3: reduce-scatter gradients asynchronously, overlapping backward; false = "
       "each reduction blocks"},
      {"zero_optimization.contiguous_gradients", T::BOOL, true,
       "gradients live in contiguous chunks (always; false is refused)"},
      {"zero_optimization.stage3_prefetch_bucket_size", T::INT, 50000000,
       "stage 3: parameter elements gathered ahead of the op that uses them; 0 = no prefetch",
       ints(0)},
      {"zero_optimization.stage3_max_live_parameters", T::INT, 1000000000,
       "stage 3: most parameter elements gathered at once (at least the chunks of one op's "
       "parameters)",
       ints(1)},
      {"zero_optimization.stage3_param_persistence_threshold", T::INT, 100000,
       "stage 3: chunks of at most this many elements stay gathered", ints(0)},
      // Offload and the parallel layout: `tide estimate` sizes them; `tide train` refuses a
      // value it cannot run yet, naming it (train/unsupported_settings.h).
      {"zero_optimization.offload_optimizer.device", T::STRING, "none",
       "none or cpu (ZeRO-Offload: fp32 master weights and Adam states on the host, CPU Adam; "
       "needs stage >= 1; docs/zero.md#offload)"},
      {"zero_optimization.offload_optimizer.pin_memory", T::BOOL, false,
       "with offload_optimizer cpu: page-locked host buffers for the copies on a GPU; a no-op "
       "on CPU (accepted, changes nothing)"},
      {"zero_optimization.offload_optimizer.delayed_update", T::BOOL, false,
       "with offload_optimizer cpu: one-step delayed parameter update (DPU): after the warm-up, "
       "step t's CPU Adam runs during step t+1, which uses the parameters of step t-1"},
      {"zero_optimization.offload_optimizer.dpu_warmup_steps", T::INT, 200,
       "with delayed_update: the first steps, updated synchronously (the paper used 40; on the "
       "default job 40 costs +3.7% final validation loss, 200 +0.7%: docs/zero.md#offload)",
       ints(0)},
      {"zero_optimization.offload_param.device", T::STRING, "none",
       "none or cpu (parameters on the host too, gathered per op into the compute tier on "
       "use; needs stage 3 and offload_optimizer cpu; any number of data-parallel ranks)"},
      {"placement.device_memory_limit", T::INT, 0,
       "bytes the compute tier (the device; on CPU a budgeted host allocator standing in for "
       "it) may hold: parameters, gradients, ZeRO buffers and, without offload, the optimizer "
       "state; exceeding it is an out-of-memory error; 0 = unlimited",
       ints(0)},
      {"placement.policy", T::STRING, "device",
       "device (every chunk where its kind is allocated, never moved) or auto (PatrickStar: "
       "chunks move between the compute tier and the host on demand within "
       "placement.device_memory_limit, farthest next use evicted first; "
       "docs/zero.md#patrickstar-automatic-placement)"},
      {"activation_checkpointing.policy", T::STRING, "none",
       "none (save all), selective (recompute attention core) or full (recompute blocks)"},
      {"activation_checkpointing.partition_activations", T::BOOL, false,
       "ZeRO-R P_a: each tensor-parallel rank keeps only its 1/t slice of every block input "
       "(needs policy full, tensor_parallel.size > 1, no sequence_parallel)"},
      {"activation_checkpointing.cpu_checkpointing", T::BOOL, false,
       "the partitioned block inputs go to host memory (needs partition_activations)"},
      {"chunk_size_mb", T::FLOAT, 0.0,
       "target chunk size (= communication bucket) in MiB of f32; the parameters one op reads "
       "stay in one chunk when they fit, a larger tensor gets a chunk of its own; 0 = the "
       "largest op's parameters (model/param_groups.h)",
       nums(0, false, 1048576)},
      {"world_size", T::INT, 0,
       "ranks in the job; 0 = as launched (tide train: the mpirun ranks; tide estimate: 1); "
       "tide train refuses a value other than the ranks it runs on",
       ints(0, 16777216)},
      {"tensor_parallel.size", T::INT, 1,
       "tensor-parallel degree t (Megatron-LM, docs/tensor-parallel.md): ranks = t x "
       "data-parallel replicas (x pipeline.stages); model.n_head must divide by t",
       ints(1, 65536)},
      {"tensor_parallel.sequence_parallel", T::BOOL, false,
       "sequence parallelism over the tensor-parallel ranks (needs tensor_parallel.size > 1 and "
       "seq_len divisible by it)"},
      {"pipeline.stages", T::INT, 1,
       "pipeline stages p (tide train: one stage per rank, ranks = p x data-parallel replicas "
       "with ZeRO 0-2 inside the stages; model.n_layer must divide over p x "
       "pipeline.virtual_stages)",
       ints(1, 65536)},
      {"pipeline.schedule", T::STRING, "1f1b",
       "gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-1p, zb-2p, zb-auto or zb-v "
       "(docs/pipeline.md); used with pipeline.stages > 1 (tide train builds zb-auto from its "
       "measured first step)"},
      {"pipeline.virtual_stages", T::INT, 1,
       "model chunks per pipeline stage: >= 2 with interleaved, 2 with zb-v (its default), 1 "
       "otherwise",
       ints(1, 65536)},
      {"pipeline.memory_limit", T::FLOAT, 0.0,
       "zb-auto's activation memory limit per stage, in micro-batches' activations (M_B), as "
       "`tide schedule --memory-limit`; 0 = 1F1B's peak (p M_B)",
       nums(0, false, 1048576)},
      {"model.preset", T::STRING, "",
       "gpt2-124m, gpt2-350m, gpt2-774m or gpt2-1.5b; sets the shape (a shape key given too "
       "must equal the preset's)"},
      {"model.n_layer", T::INT, 4, "transformer blocks", ints(1, 65536)},
      {"model.n_head", T::INT, 4, "attention heads", ints(1, 65536)},
      {"model.n_embd", T::INT, 192, "hidden size (divisible by n_head)", ints(1, 1048576)},
      {"model.vocab_size", T::INT, 0,
       "vocabulary; 0 = the data's tokenizer (token shards hold ids below 65536)", ints(0, 65536)},
      {"model.max_seq_len", T::INT, 0, "positions; 0 = seq_len", ints(0, 1048576)},
      {"model.dropout", T::FLOAT, 0.0, "dropout rate (embedding, attention, residual)",
       nums(0, false, 1, true)},
      {"data.dir", T::PATH, "",
       "directory from `tide prepare` (train.bin, val.bin, tokenizer.json, meta.json); "
       "empty = the embedded default corpus"},
      {"data.train", T::PATH, "", "training shards (path or glob); default data.dir/train.bin"},
      {"data.val", T::PATH, "",
       "validation shards (path or glob); default data.dir/val.bin (no validation if that is "
       "missing)"},
      {"data.shuffle", T::BOOL, true, "shuffle sequence order each epoch"},
      {"eval.interval", T::INT, 100, "steps between validation runs; 0 = only at the end", ints(0)},
      {"eval.sequences", T::INT, 128,
       "size of the fixed validation set: the first N sequences of the validation data, the "
       "same whatever the ranks, micro-batch or accumulation",
       ints(1)},
      {"log.interval", T::INT, 10, "steps between metrics lines", ints(1)},
      {"steps_per_print", T::INT, 10,
       "DeepSpeed's name for log.interval: either sets both; giving both with different values "
       "is an error",
       ints(1)},
      {"log.progress", T::BOOL, true,
       "a progress line rewritten in place every step when stdout is a terminal of one process "
       "(not under mpirun); false, or any other stdout (a file, a pipe, mpirun's ranks): one whole "
       "line every log.interval steps"},
      {"out_dir", T::STRING, "runs/default",
       "metrics.jsonl, config.json and checkpoints; tide will not start over an earlier run's "
       "files here (see out_dir_overwrite)"},
      {"out_dir_overwrite", T::BOOL, false,
       "true = a new run may replace the metrics.jsonl, config.json and checkpoints of an "
       "earlier run in out_dir; false = it refuses to start (checkpoint.resume continues a run "
       "in place)"},
      {"checkpoint.interval", T::INT, 0,
       "steps between resumable checkpoints (out_dir/model_step<N>.ckpt); 0 = only the final one",
       ints(0)},
      {"checkpoint.resume", T::PATH, "",
       "checkpoint to resume from (weights, optimizer state, step, data position); same seed "
       "and global batch required; out_dir/metrics.jsonl keeps its lines up to that step and "
       "goes on from there; \"auto\" = the newest complete checkpoint in out_dir, or a fresh "
       "start when there is none (for relaunch loops)"},
      {"checkpoint.new_lr_schedule", T::BOOL, false,
       "with checkpoint.resume: true = continue with this config's learning-rate schedule where "
       "it differs from the checkpoint's (the lr jumps at the resumed step); false = such a "
       "resume is refused, naming the keys that differ"},
      {"init_from", T::PATH, "",
       "checkpoint (file or sharded directory) whose weights start the run at step 0, e.g. "
       "one from `tide import`; its model shape must be this config's; no optimizer state, "
       "step or data position is taken (checkpoint.resume, when set, wins)"},
      {"comm.timeout_s", T::FLOAT, 600.0,
       "seconds any rank waits in one collective or send/recv before the job is ended with the "
       "operation, step and missing ranks named (keep it above the longest checkpoint write); "
       "see docs/reliability.md",
       nums(0, /*lo_open=*/true)},
      {"tensorboard.enabled", T::BOOL, false,
       "write TensorBoard event files (rank 0): every metrics.jsonl value as a scalar, at its "
       "step; see docs/observability.md"},
      {"tensorboard.output_path", T::STRING, "",
       "directory of the event files (created); empty = out_dir/tensorboard"},
      {"tensorboard.job_name", T::STRING, "",
       "subdirectory of tensorboard.output_path for this run (DeepSpeed's job_name); empty = "
       "none"},
      {"trace.steps", T::INT, 0,
       "record a Chrome trace (chrome://tracing, Perfetto) of this many steps, after one "
       "untraced warm-up step: block parts, communication, chunk moves, optimizer; 0 = off",
       ints(0)},
      {"trace.path", T::STRING, "",
       "the trace file (rank 0 gathers every rank's events into it); empty = out_dir/trace.json"},
  };
  return keys;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const ConfigKey* find_key(const std::string& path) {
  for (const ConfigKey& k : config_schema())
    if (path == k.path) return &k;
  return nullptr;
}

// True when some schema key lives below `path` (so `path` is an object).
bool is_section(const std::string& path) {
  for (const ConfigKey& k : config_schema())
    if (std::string(k.path).rfind(path + ".", 0) == 0) return true;
  return false;
}

// The schema key closest to a misspelt one, or "" when none is close.
std::string suggestion(const std::string& path) {
  std::string best;
  size_t best_d = SIZE_MAX;
  // Candidates: every key and every section above one ("paralel" -> "parallel").
  for (const ConfigKey& k : config_schema()) {
    const std::string key = k.path;
    for (size_t end = key.find('.');; end = key.find('.', end + 1)) {
      const std::string candidate = key.substr(0, end);
      const size_t d = edit_distance(path, candidate);
      if (d < best_d) best_d = d, best = candidate;
      if (end == std::string::npos) break;
    }
  }
  return best_d <= std::max<size_t>(3, path.size() / 3) ? best : "";
}

// One error for all the unknown keys of a config, each with its suggestion.
[[noreturn]] void unknown_keys(const std::vector<std::string>& paths) {
  if (paths.size() == 1) {
    const std::string best = suggestion(paths[0]);
    if (!best.empty())
      TIDE_FAIL("unknown config key '{}'; did you mean '{}'? (`tide train --list-keys` lists all)",
                paths[0], best);
    TIDE_FAIL("unknown config key '{}'; `tide train --list-keys` lists the valid keys", paths[0]);
  }
  std::string list;
  for (const std::string& p : paths) {
    const std::string best = suggestion(p);
    list += fmt::format("{}'{}'{}", list.empty() ? "" : ", ", p,
                        best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best));
  }
  TIDE_FAIL("{} unknown config keys: {}; fix or remove them (`tide train --list-keys` lists all)",
            paths.size(), list);
}

// A bound as the user writes it: 65536, 0.5, 1e+15.
std::string num(double x) {
  return fmt::format("{}", x);
}

// What a key accepts: its type and range, in words ("an integer in [1, 65536]").
std::string describe(const ConfigKey& k) {
  const ConfigRange& r = k.range;
  auto number_range = [&] {
    if (r.hi >= kNumMax) return fmt::format("{} {}", r.lo_open ? ">" : ">=", num(r.lo));
    return fmt::format("in {}{}, {}{}", r.lo_open ? "(" : "[", num(r.lo), num(r.hi),
                       r.hi_open ? ")" : "]");
  };
  switch (k.type) {
    case ConfigType::INT:
      if (r.hi >= kNoMax) return fmt::format("an integer >= {}", num(r.lo));
      return fmt::format("an integer in [{}, {}]", num(r.lo), num(r.hi));
    case ConfigType::UINT:
      return "a non-negative integer";
    case ConfigType::FLOAT:
      return "a number " + number_range();
    case ConfigType::BOOL:
      return "true or false";
    case ConfigType::STRING:
      return "a string";
    case ConfigType::PATH:
      return "a path";
    case ConfigType::FLOAT_PAIR:
      return "a list of two numbers " + number_range();
  }
  return "?";
}

bool number_in_range(const json& v, const ConfigRange& r) {
  if (!v.is_number()) return false;
  const double x = v.get<double>();
  return std::isfinite(x) && (r.lo_open ? x > r.lo : x >= r.lo) &&
         (r.hi_open ? x < r.hi : x <= r.hi);
}

// True when `v` is a legal value of key `k`: the right type, and for numbers in range (checked
// on the JSON value, before anything is narrowed to the field's type).
bool valid_value(const json& v, const ConfigKey& k) {
  const ConfigRange& r = k.range;
  switch (k.type) {
    case ConfigType::INT: {
      // Without an upper bound (kNoMax) an integer key takes any int64.
      if (!v.is_number_integer()) return false;
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return false;
      const int64_t x = v.get<int64_t>();
      return static_cast<double>(x) >= r.lo && (r.hi >= kNoMax || static_cast<double>(x) <= r.hi);
    }
    case ConfigType::UINT:
      return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    case ConfigType::FLOAT:
      return number_in_range(v, r);
    case ConfigType::BOOL:
      return v.is_boolean();
    case ConfigType::STRING:
    case ConfigType::PATH:
      return v.is_string();
    case ConfigType::FLOAT_PAIR:
      return v.is_array() && v.size() == 2 && number_in_range(v[0], r) && number_in_range(v[1], r);
  }
  return false;
}

// A user's JSON value for an error line (invalid UTF-8 replaced, never a dump() exception).
std::string printable(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string invalid_value(const std::string& path, const ConfigKey& k, const json& v) {
  const bool empty_default = k.default_value.is_string() && k.default_value.empty();
  return fmt::format("config key '{}' must be {} (got {}){}", path, describe(k), printable(v),
                     empty_default ? "" : "; the default is " + k.default_value.dump());
}

// Checks every leaf of `j` against the schema and fills `flat` with path -> value. Unknown
// keys go to `unknown` and wrong values to `problems`, so that one error can list them all.
void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& flat,
             std::vector<std::string>& unknown, std::vector<std::string>& problems) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (const ConfigKey* k = find_key(path)) {
      if (valid_value(it.value(), *k))
        flat[path] = it.value();
      else
        problems.push_back(invalid_value(path, *k, it.value()));
    } else if (is_section(path)) {
      if (it.value().is_object())
        flatten(it.value(), path, flat, unknown, problems);
      else
        problems.push_back(fmt::format(
            "config key '{}' must be an object with keys inside, like {{\"{}\": {{...}}}} (got {})",
            path, it.key(), printable(it.value())));
    } else {
      unknown.push_back(path);
    }
  }
}

// Sets a dotted path in a JSON object, creating the sections on the way.
void set_path(json& j, const std::string& path, const json& value) {
  json* node = &j;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1) {
    node = &(*node)[path.substr(start, dot - start)];
    if (node->is_null()) *node = json::object();
    TIDE_CHECK(node->is_object(),
               "config key '{}' is {} in the config file, so the override '{}' cannot go inside "
               "it; make '{}' an object in the file, or drop the override",
               path.substr(0, dot), printable(*node), path, path.substr(0, dot));
  }
  (*node)[path.substr(start)] = value;
}

// A checkpoint named by config key `key` (empty: none) must exist, as a file or as a sharded
// checkpoint directory (ZeRO runs write those).
void check_checkpoint_path(const char* key, const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  TIDE_CHECK(fs::exists(path, ec), "{}: cannot open checkpoint '{}' (no such file); check the path",
             key, path);
  TIDE_CHECK(!is_uncommitted_checkpoint(path), "{}: {}", key, uncommitted_checkpoint_message(path));
  TIDE_CHECK(!fs::is_directory(path, ec) || is_sharded_checkpoint(path),
             "{}: '{}' is a directory but not a sharded checkpoint (it has no index.json); name "
             "a checkpoint such as {}/model.ckpt",
             key, path, path);
}

// A path key, when given, must name something that exists: checked here so that a typo stops
// the run before anything is prepared or written, with the key's name in the message.
void check_path(const char* key, const std::string& path, bool directory) {
  if (path.empty()) return;
  std::error_code ec;
  if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = ::glob(path.c_str(), 0, nullptr, &g);
    const size_t n = rc == 0 ? g.gl_pathc : 0;
    globfree(&g);
    TIDE_CHECK(n > 0,
               "{} '{}' matches no files; check the pattern, or create shards with `tide prepare`",
               key, path);
    return;
  }
  if (directory) {
    TIDE_CHECK(fs::is_directory(path, ec),
               "{} '{}' does not exist{}; create it with `tide prepare --input <text files> "
               "--out-dir {}`",
               key, path, fs::exists(path, ec) ? " as a directory" : "", path);
    return;
  }
  TIDE_CHECK(fs::exists(path, ec), "{} '{}' does not exist; check the path", key, path);
  TIDE_CHECK(!fs::is_directory(path, ec), "{} '{}' is a directory; it must name a file", key, path);
}

}  // namespace

namespace {

TrainConfig parse_checked(const json& j, std::vector<std::string> unknown, bool check_paths) {
  TIDE_CHECK(j.is_object(), "the config must be a JSON object {{...}} (got {})", j.type_name());
  std::map<std::string, json> given, v;
  std::vector<std::string> problems;
  flatten(j, "", given, unknown, problems);
  if (!unknown.empty()) unknown_keys(unknown);
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += (all.empty() ? "" : "; ") + p;
    throw Error(all);
  }
  // The schema's defaults, then what the config (file or default_config()) and the overrides
  // give.
  auto is_given = [&](const char* p) { return given.count(p) > 0; };
  for (const ConfigKey& k : config_schema()) v[k.path] = k.default_value;
  for (const auto& [key, value] : given) v[key] = value;
  // One spelling per value (2 and 2.0 are the same rate), so that config.json and the ranks'
  // agreement hashes see values, not spellings.
  for (const ConfigKey& k : config_schema()) {
    if (k.type == ConfigType::FLOAT) v[k.path] = v[k.path].get<double>();
    if (k.type == ConfigType::FLOAT_PAIR)
      v[k.path] = json::array({v[k.path][0].get<double>(), v[k.path][1].get<double>()});
  }
  // Every value now has its type and lies in its key's range: the narrowing below is exact.
  auto i = [&](const char* p) { return v.at(p).get<int64_t>(); };
  auto f = [&](const char* p) { return v.at(p).get<double>(); };
  auto s = [&](const char* p) { return v.at(p).get<std::string>(); };
  auto b = [&](const char* p) { return v.at(p).get<bool>(); };

  TrainConfig c;
  c.micro_batch = static_cast<int>(i("train_micro_batch_size_per_gpu"));
  c.grad_accum = static_cast<int>(i("gradient_accumulation_steps"));
  c.train_batch_size = static_cast<int>(i("train_batch_size"));
  c.seq_len = static_cast<int>(i("seq_len"));
  c.train_steps = i("train_steps");
  c.seed = v.at("seed").get<uint64_t>();
  c.device = s("device");
  TIDE_CHECK(c.device == "cpu" || c.device == "auto" || c.device == "cuda" ||
                 (c.device.starts_with("cuda:") && c.device.size() > 5 &&
                  c.device.find_first_not_of("0123456789", 5) == std::string::npos),
             "device '{}' is not a device; use cpu, cuda, cuda:N or auto", c.device);
  c.threads = static_cast<int>(i("threads"));
  // SGD is a name tide estimate sizes (no optimizer state); tide train refuses it
  // (unsupported_settings.h).
  const std::string opt = s("optimizer.type");
  TIDE_CHECK(opt == "AdamW" || opt == "adamw" || opt == "SGD" || opt == "sgd",
             "optimizer.type '{}' is not supported; use AdamW", opt);
  c.optimizer_type = opt == "SGD" || opt == "sgd" ? "SGD" : "AdamW";
  v["optimizer.type"] = c.optimizer_type;
  c.lr = f("optimizer.params.lr");
  c.beta1 = v.at("optimizer.params.betas")[0].get<double>();
  c.beta2 = v.at("optimizer.params.betas")[1].get<double>();
  c.eps = f("optimizer.params.eps");
  c.weight_decay = f("optimizer.params.weight_decay");
  // The schedule, as DeepSpeed reads its scheduler section (optim/lr_schedule.h).
  LrSchedule& ls = c.lr_schedule;
  ls.type = parse_lr_schedule_type(s("scheduler.type"));
  ls.lr = c.lr;
  ls.warmup_min_lr = f("scheduler.params.warmup_min_lr");
  ls.warmup_max_lr = f("scheduler.params.warmup_max_lr");
  TIDE_CHECK(ls.warmup_max_lr >= 0 || ls.warmup_max_lr == -1.0,
             "config key 'scheduler.params.warmup_max_lr' must be >= 0, or -1 for DeepSpeed's "
             "default (got {})",
             ls.warmup_max_lr);
  const bool uses_max_lr =
      ls.type == LrScheduleType::WARMUP_LR || ls.type == LrScheduleType::WARMUP_DECAY_LR;
  if (ls.warmup_max_lr == -1.0) {
    // DeepSpeed's defaults differ: WarmupLR's None is the optimizer's lr, WarmupDecayLR's is
    // 0.001. Recorded where the schedule uses it (else it stays -1, unused).
    ls.warmup_max_lr = ls.type == LrScheduleType::WARMUP_DECAY_LR ? 0.001 : c.lr;
    if (uses_max_lr) v["scheduler.params.warmup_max_lr"] = ls.warmup_max_lr;
  }
  ls.warmup_type = parse_warmup_type(s("scheduler.params.warmup_type"));
  ls.total_num_steps = i("scheduler.params.total_num_steps");
  if (ls.total_num_steps == 0) ls.total_num_steps = c.train_steps;
  v["scheduler.params.total_num_steps"] = ls.total_num_steps;
  ls.warmup_num_steps = i("scheduler.params.warmup_num_steps");
  TIDE_CHECK(ls.warmup_num_steps != 0,
             "scheduler.params.warmup_num_steps must be a positive integer (as in DeepSpeed), or "
             "-1 for 10% of total_num_steps");
  if (ls.warmup_num_steps == -1) {
    ls.warmup_num_steps = std::max<int64_t>(1, ls.total_num_steps / 10);
    v["scheduler.params.warmup_num_steps"] = ls.warmup_num_steps;
  }
  ls.cos_min_ratio = f("scheduler.params.cos_min_ratio");
  ls.warmup_min_ratio = f("scheduler.params.warmup_min_ratio");
  c.grad_clip = static_cast<float>(f("gradient_clipping"));
  // What the optimizer and the schedule check at their first step, checked now (as the Trainer
  // builds them), so that no bad value gets as far as out_dir.
  AdamWHyper h;
  h.lr = static_cast<float>(c.lr);
  h.beta1 = c.beta1;
  h.beta2 = c.beta2;
  h.eps = c.eps;
  h.weight_decay = c.weight_decay;
  check_adamw_args(h, AdamWStep{1, 1.0f});
  check_lr_schedule(c.lr_schedule);
  c.bf16 = b("bf16.enabled");
  c.fp16 = b("fp16.enabled");
  TIDE_CHECK(!(c.bf16 && c.fp16), "bf16.enabled and fp16.enabled cannot both be true");
  c.zero.stage = static_cast<int>(i("zero_optimization.stage"));
  c.zero.reduce_bucket_size = i("zero_optimization.reduce_bucket_size");
  c.zero.allgather_bucket_size = i("zero_optimization.allgather_bucket_size");
  c.zero.overlap_comm = b("zero_optimization.overlap_comm");
  TIDE_CHECK(b("zero_optimization.contiguous_gradients"),
             "zero_optimization.contiguous_gradients = false is not available: tide's gradients "
             "always live in contiguous chunks; remove the key or set it to true");
  c.zero.prefetch_bucket_size = i("zero_optimization.stage3_prefetch_bucket_size");
  c.zero.max_live_parameters = i("zero_optimization.stage3_max_live_parameters");
  c.zero.param_persistence_threshold = i("zero_optimization.stage3_param_persistence_threshold");
  c.activation_policy = parse_activation_policy(s("activation_checkpointing.policy"));
  v["activation_checkpointing.policy"] = activation_policy_name(c.activation_policy);
  c.chunk_size_mb = f("chunk_size_mb");
  // Offload and the parallel layout: the names and combinations are checked here, for both
  // commands; what tide train cannot run yet, it refuses (unsupported_settings.h).
  c.offload_optimizer = s("zero_optimization.offload_optimizer.device");
  c.offload_param = s("zero_optimization.offload_param.device");
  for (const char* key :
       {"zero_optimization.offload_optimizer.device", "zero_optimization.offload_param.device"})
    TIDE_CHECK(s(key) == "none" || s(key) == "cpu",
               "config key '{}' must be \"cpu\" or \"none\" (got \"{}\"){}", key, s(key),
               s(key) == "nvme" ? "; tide has no NVMe offload (DeepSpeed's ZeRO-Infinity)" : "");
  TIDE_CHECK(c.offload_param == "none" || c.offload_optimizer == "cpu",
             "zero_optimization.offload_param.device is \"cpu\" but offload_optimizer is not; "
             "offloading the parameters needs the optimizer on the host too, so set "
             "zero_optimization.offload_optimizer.device to \"cpu\"");
  // ZeRO-Offload (train/offload_policy.h) and the compute tier's budget.
  c.zero.offload_optimizer.enabled = c.offload_optimizer == "cpu";
  c.zero.offload_optimizer.pin_memory = b("zero_optimization.offload_optimizer.pin_memory");
  c.zero.offload_optimizer.delayed_update = b("zero_optimization.offload_optimizer.delayed_update");
  c.zero.offload_optimizer.dpu_warmup_steps =
      i("zero_optimization.offload_optimizer.dpu_warmup_steps");
  TIDE_CHECK(!c.zero.offload_optimizer.delayed_update || c.zero.offload_optimizer.enabled,
             "zero_optimization.offload_optimizer.delayed_update=true needs "
             "zero_optimization.offload_optimizer.device=\"cpu\" (the delayed update is the CPU "
             "optimizer's); set the device or remove delayed_update");
  c.device_memory_limit = i("placement.device_memory_limit");
  c.placement_policy = s("placement.policy");
  TIDE_CHECK(c.placement_policy == "device" || c.placement_policy == "auto",
             "placement.policy must be \"device\" or \"auto\" (got \"{}\")", c.placement_policy);
  // On a GPU auto's budget would default to the device's free memory; on the CPU the device is
  // the budgeted stand-in, whose size only the key can give.
  TIDE_CHECK(c.placement_policy != "auto" || c.device_memory_limit > 0,
             "placement.policy=\"auto\" needs placement.device_memory_limit > 0 on the CPU (the "
             "bytes of the budgeted allocator standing in for the device, which auto fills and "
             "evicts from); set placement.device_memory_limit, or placement.policy=\"device\"");
  TIDE_CHECK(
      c.placement_policy != "auto" || (c.offload_optimizer == "none" && c.offload_param == "none"),
      "placement.policy=\"auto\" with zero_optimization.offload_optimizer/offload_param "
      "\"cpu\": auto decides where the optimizer state and the parameters live itself; "
      "set both offload devices to \"none\", or placement.policy=\"device\"");
  c.world_size = static_cast<int>(i("world_size"));
  c.tensor_parallel = static_cast<int>(i("tensor_parallel.size"));
  c.sequence_parallel = b("tensor_parallel.sequence_parallel");
  c.partition_activations = b("activation_checkpointing.partition_activations");
  c.cpu_checkpointing = b("activation_checkpointing.cpu_checkpointing");
  c.pipeline_stages = static_cast<int>(i("pipeline.stages"));
  c.pipeline_schedule = canonical_schedule_name(s("pipeline.schedule"));
  v["pipeline.schedule"] = c.pipeline_schedule;
  c.virtual_stages = static_cast<int>(i("pipeline.virtual_stages"));
  // zb-v always runs two chunks per stage: the key may say so, or be left at 1.
  if (c.pipeline_schedule == "zb-v" && c.pipeline_stages > 1 &&
      !is_given("pipeline.virtual_stages"))
    c.virtual_stages = 2;
  v["pipeline.virtual_stages"] = c.virtual_stages;
  c.pipeline_memory_limit = f("pipeline.memory_limit");

  c.model_preset = s("model.preset");
  if (!c.model_preset.empty()) {
    c.model = GPTConfig::preset(c.model_preset);
    // A shape key next to a preset would be dropped: an error unless it says the same.
    const std::pair<const char*, int> shape[] = {{"model.n_layer", c.model.n_layer},
                                                 {"model.n_head", c.model.n_head},
                                                 {"model.n_embd", c.model.n_embd},
                                                 {"model.vocab_size", c.model.vocab_size},
                                                 {"model.max_seq_len", c.model.max_seq_len}};
    for (const auto& [key, preset_value] : shape)
      TIDE_CHECK(!is_given(key) || i(key) == preset_value,
                 "{}={} conflicts with model.preset={}, whose {} is {}; remove {}, or remove "
                 "model.preset and give every shape key",
                 key, i(key), c.model_preset, key, preset_value, key);
  } else {
    c.model.n_layer = static_cast<int>(i("model.n_layer"));
    c.model.n_head = static_cast<int>(i("model.n_head"));
    c.model.n_embd = static_cast<int>(i("model.n_embd"));
    c.model.vocab_size = static_cast<int>(i("model.vocab_size"));
    c.model.max_seq_len = static_cast<int>(i("model.max_seq_len"));
    if (c.model.max_seq_len == 0) c.model.max_seq_len = c.seq_len;
  }
  // The shape the run uses (a preset's, max_seq_len 0 -> seq_len).
  v["model.n_layer"] = c.model.n_layer;
  v["model.n_head"] = c.model.n_head;
  v["model.n_embd"] = c.model.n_embd;
  v["model.vocab_size"] = c.model.vocab_size;
  v["model.max_seq_len"] = c.model.max_seq_len;
  c.model.dropout = static_cast<float>(f("model.dropout"));
  TIDE_CHECK(c.seq_len <= c.model.max_seq_len,
             "seq_len {} exceeds model.max_seq_len {}; lower seq_len or raise model.max_seq_len",
             c.seq_len, c.model.max_seq_len);
  GPTConfig shape = c.model;  // vocab_size 0 (from the data) is checked once it is known
  if (shape.vocab_size == 0) shape.vocab_size = 2;
  shape.validate();

  c.data_dir = s("data.dir");
  c.train_data = s("data.train");
  c.val_data = s("data.val");
  c.shuffle = b("data.shuffle");
  c.eval_interval = i("eval.interval");
  c.eval_sequences = i("eval.sequences");
  c.log_interval = i("log.interval");
  if (is_given("steps_per_print")) {
    TIDE_CHECK(!is_given("log.interval") || i("log.interval") == i("steps_per_print"),
               "steps_per_print ({}) and log.interval ({}) are the same setting with different "
               "values; give one of them",
               i("steps_per_print"), i("log.interval"));
    c.log_interval = i("steps_per_print");
  }
  v["log.interval"] = v["steps_per_print"] = c.log_interval;
  c.progress = b("log.progress");
  c.out_dir = s("out_dir");
  TIDE_CHECK(!c.out_dir.empty(), "out_dir is empty; name a directory, e.g. out_dir=runs/mine");
  c.out_dir_overwrite = b("out_dir_overwrite");
  c.checkpoint_interval = i("checkpoint.interval");
  c.resume = s("checkpoint.resume");
  c.new_lr_schedule = b("checkpoint.new_lr_schedule");
  c.init_from = s("init_from");
  c.comm_timeout_s = f("comm.timeout_s");
  c.tensorboard = b("tensorboard.enabled");
  c.tensorboard_path = s("tensorboard.output_path");
  c.tensorboard_job = s("tensorboard.job_name");
  TIDE_CHECK(c.tensorboard_job.find('/') == std::string::npos && c.tensorboard_job != "." &&
                 c.tensorboard_job != "..",
             "tensorboard.job_name '{}' must be one directory name (no '/'); put the parent "
             "directories in tensorboard.output_path",
             c.tensorboard_job);
  c.trace_steps = i("trace.steps");
  c.trace_path = s("trace.path");
  c.is_default_run = c.data_dir.empty() && c.train_data.empty();
  check_tensor_parallel_settings(c);  // needs the shape and the activation policy
  check_pipeline_settings(c);         // needs the shape, the batch and ZeRO: last
  c.values = json(v);

  if (!check_paths) return c;
  check_path("data.dir", c.data_dir, /*directory=*/true);
  check_path("data.train", c.train_data, false);
  check_path("data.val", c.val_data, false);
  if (c.resume != "auto") check_checkpoint_path("checkpoint.resume", c.resume);
  check_checkpoint_path("init_from", c.init_from);
  return c;
}

}  // namespace

TrainConfig parse_train_config(const json& j, bool check_paths) {
  return parse_checked(j, {}, check_paths);
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              bool check_paths) {
  json j = path.empty() ? default_config() : json::object();
  if (!path.empty()) {
    std::error_code ec;
    TIDE_CHECK(!fs::is_directory(path, ec),
               "config file '{}' is a directory; pass a JSON file such as run.json", path);
    std::ifstream f(path);
    TIDE_CHECK(f.good(), "cannot open config file '{}'; check the path", path);
    try {
      j = json::parse(f);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
      TIDE_FAIL("config file '{}' is not valid JSON: {}", path, json_error_text(e));
    } catch (const std::exception& e) {
      TIDE_FAIL("cannot read config file '{}' ({}); check that it is a readable file", path,
                e.what());
    }
    TIDE_CHECK(j.is_object(),
               "config file '{}' holds a JSON {}, not an object {{\"key\": value, ...}}; put the "
               "keys in one object",
               path, j.type_name());
  }
  std::vector<std::string> unknown;
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    TIDE_CHECK(eq != std::string::npos && eq > 0,
               "override '{}' must look like key=value, e.g. optimizer.params.lr=3e-4", o);
    const std::string key = o.substr(0, eq), text = o.substr(eq + 1);
    if (!find_key(key)) {
      unknown.push_back(key);
      continue;
    }
    // A value is read as JSON when it parses (numbers, true, [0.9,0.95]), else as a string.
    json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) value = text;
    try {
      (void)value.dump();  // strings from the command line are bytes: they must be UTF-8
    } catch (const json::exception&) {
      TIDE_FAIL("override of '{}': the value is not valid UTF-8", key);
    }
    set_path(j, key, value);
  }
  return parse_checked(j, unknown, check_paths);
}

std::vector<std::string> earlier_run_files(const std::string& out_dir) {
  std::vector<std::string> found;
  std::error_code ec;
  if (!fs::is_directory(out_dir, ec)) return found;
  for (const char* name : {"metrics.jsonl", "config.json", "model.ckpt"})
    if (fs::exists(fs::path(out_dir) / name, ec)) found.push_back(name);
  std::vector<std::string> steps;
  for (const auto& e : fs::directory_iterator(out_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("model_step") && name.ends_with(".ckpt")) steps.push_back(name);
  }
  std::sort(steps.begin(), steps.end());
  found.insert(found.end(), steps.begin(), steps.end());
  return found;
}

void check_out_dir(const TrainConfig& cfg) {
  // resume=auto found no checkpoint: out_dir holds at most an earlier attempt of this run.
  if (!cfg.resume.empty() || cfg.out_dir_overwrite ||
      cfg.values.value("checkpoint.resume", "") == "auto")
    return;
  const std::vector<std::string> files = earlier_run_files(cfg.out_dir);
  if (files.empty()) return;
  std::string list;
  for (size_t n = 0; n < files.size() && n < 3; ++n) list += (n ? ", " : "") + files[n];
  if (files.size() > 3) list += fmt::format(" and {} more", files.size() - 3);
  const std::string ckpt = (fs::path(cfg.out_dir) / "model.ckpt").string();
  TIDE_FAIL(
      "out_dir '{}' already holds an earlier run ({}); choose another out_dir, continue that run "
      "with checkpoint.resume={}, or set out_dir_overwrite=true to replace it",
      cfg.out_dir, list, fs::exists(ckpt) ? ckpt : "<one of its checkpoints>");
}

json config_to_json(const TrainConfig& c) {
  json j = json::object();
  for (const auto& [key, value] : c.values.items()) set_path(j, key, value);
  return j;
}

void set_resolved_value(TrainConfig& c, const std::string& key, const json& value) {
  TIDE_CHECK(find_key(key) != nullptr, "set_resolved_value: '{}' is not a config key", key);
  c.values[key] = value;
}

const json& default_config() {
  // Close to nanoGPT's schedule: a linear warmup over 10% of the steps (60 of the default
  // 600), then a cosine to 10% of lr.
  static const json config = json::parse(R"({
    "scheduler": {
      "type": "WarmupCosineLR",
      "params": {"warmup_num_steps": -1, "warmup_type": "linear", "cos_min_ratio": 0.1}
    }
  })");
  return config;
}

std::string config_reference_markdown() {
  std::string s = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const ConfigKey& k : config_schema())
    s += fmt::format("| `{}` | {} | `{}` | {} |\n", k.path, describe(k), k.default_value.dump(),
                     k.doc);
  return s;
}

}  // namespace tide
