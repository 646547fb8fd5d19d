#include "tide/train/config.h"

#include <algorithm>
#include <fstream>
#include <map>

#include "tide/core/error.h"

namespace tide {

using json = nlohmann::json;

const std::vector<ConfigKey>& config_schema() {
  using T = ConfigType;
  static const std::vector<ConfigKey> keys = {
      {"train_micro_batch_size_per_gpu", T::INT, 8, "sequences per micro-batch on each rank"},
      {"gradient_accumulation_steps", T::INT, 1, "micro-batches accumulated per optimizer step"},
      {"train_batch_size", T::INT, 0,
       "global batch in sequences; 0 = not checked, else must equal micro * accum * dp"},
      {"seq_len", T::INT, 128, "tokens per sequence (at most model.max_seq_len)"},
      {"train_steps", T::INT, 600, "optimizer steps to run"},
      {"seed", T::INT, 1337, "seed of weight initialisation, data order and dropout"},
      {"device", T::STRING, "cpu", "cpu, cuda, cuda:N or auto"},
      {"threads", T::INT, 0, "OpenMP threads per rank; 0 = OpenMP's default"},
      {"optimizer.type", T::STRING, "AdamW", "only AdamW"},
      {"optimizer.params.lr", T::FLOAT, 1e-3, "peak learning rate"},
      {"optimizer.params.betas", T::FLOAT_PAIR, json::array({0.9, 0.95}), "Adam beta1, beta2"},
      {"optimizer.params.eps", T::FLOAT, 1e-8, "Adam epsilon"},
      {"optimizer.params.weight_decay", T::FLOAT, 0.1,
       "decoupled weight decay (matrices and embeddings only)"},
      {"scheduler.type", T::STRING, "WarmupCosineLR", "only WarmupCosineLR"},
      {"scheduler.params.warmup_num_steps", T::INT, -1,
       "linear warmup steps; -1 = 10% of the decay steps"},
      {"scheduler.params.total_num_steps", T::INT, 0,
       "step where the cosine reaches its floor; 0 = train_steps"},
      {"scheduler.params.cos_min_ratio", T::FLOAT, 0.1, "floor of the cosine as a fraction of lr"},
      {"gradient_clipping", T::FLOAT, 1.0, "clip the global gradient norm to this; 0 = off"},
      {"bf16.enabled", T::BOOL, false, "bf16 compute (needs --device cuda)"},
      {"fp16.enabled", T::BOOL, false, "fp16 compute with dynamic loss scaling (needs cuda)"},
      {"zero_optimization.stage", T::INT, 0, "ZeRO stage; 0 = data parallel (DDP)"},
      {"activation_checkpointing.policy", T::STRING, "none",
       "none (save all), selective (recompute attention core) or full (recompute blocks)"},
      {"chunk_size_mb", T::FLOAT, 0.0,
       "target chunk size (= communication bucket) in MiB of f32; a larger tensor gets a chunk "
       "of its own; 0 = the largest tensor's size"},
      {"model.preset", T::STRING, "",
       "gpt2-124m, gpt2-350m, gpt2-774m or gpt2-1.5b; overrides the shape keys"},
      {"model.n_layer", T::INT, 4, "transformer blocks"},
      {"model.n_head", T::INT, 4, "attention heads"},
      {"model.n_embd", T::INT, 192, "hidden size (divisible by n_head)"},
      {"model.vocab_size", T::INT, 0, "vocabulary; 0 = the data's tokenizer"},
      {"model.max_seq_len", T::INT, 0, "positions; 0 = seq_len"},
      {"model.dropout", T::FLOAT, 0.0, "dropout rate (embedding, attention, residual)"},
      {"data.dir", T::STRING, "",
       "directory from `tide prepare` (train.bin, val.bin, tokenizer.json, meta.json); "
       "empty = the embedded default corpus"},
      {"data.train", T::STRING, "", "training shards (path or glob); default data.dir/train.bin"},
      {"data.val", T::STRING, "", "validation shards; default data.dir/val.bin"},
      {"data.shuffle", T::BOOL, true, "shuffle sequence order each epoch"},
      {"eval.interval", T::INT, 100, "steps between validation runs; 0 = only at the end"},
      {"eval.sequences", T::INT, 128,
       "size of the fixed validation set: the first N sequences of the validation data, the "
       "same whatever the ranks, micro-batch or accumulation"},
      {"log.interval", T::INT, 10, "steps between metrics lines"},
      {"log.progress", T::BOOL, true, "live progress line on the terminal"},
      {"out_dir", T::STRING, "runs/default", "metrics.jsonl, config.json and checkpoints"},
      {"checkpoint.interval", T::INT, 0,
       "steps between resumable checkpoints (out_dir/model_step<N>.ckpt); 0 = only the final one"},
      {"checkpoint.resume", T::STRING, "",
       "checkpoint to resume from (weights, optimizer state, step, data position); same seed "
       "and global batch required"},
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

[[noreturn]] void unknown_key(const std::string& path) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const ConfigKey& k : config_schema()) {
    const size_t d = edit_distance(path, k.path);
    if (d < best_d) best_d = d, best = k.path;
  }
  if (best_d <= std::max<size_t>(3, path.size() / 3))
    TIDE_FAIL("unknown config key '{}'; did you mean '{}'? (`tide train --list-keys` lists all)",
              path, best);
  TIDE_FAIL("unknown config key '{}'; `tide train --list-keys` lists the valid keys", path);
}

const char* type_name(ConfigType t) {
  switch (t) {
    case ConfigType::INT:
      return "an integer";
    case ConfigType::FLOAT:
      return "a number";
    case ConfigType::BOOL:
      return "true or false";
    case ConfigType::STRING:
      return "a string";
    case ConfigType::FLOAT_PAIR:
      return "a list of two numbers";
  }
  return "?";
}

bool has_type(const json& v, ConfigType t) {
  switch (t) {
    case ConfigType::INT:
      return v.is_number_integer();
    case ConfigType::FLOAT:
      return v.is_number();
    case ConfigType::BOOL:
      return v.is_boolean();
    case ConfigType::STRING:
      return v.is_string();
    case ConfigType::FLOAT_PAIR:
      return v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number();
  }
  return false;
}

// Checks every leaf of `j` against the schema; fills `flat` with path -> value.
void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& flat) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (const ConfigKey* k = find_key(path)) {
      TIDE_CHECK(has_type(it.value(), k->type), "config key '{}' must be {} (got {})", path,
                 type_name(k->type),
                 it.value().dump(-1, ' ', false, json::error_handler_t::replace));
      flat[path] = it.value();
    } else if (is_section(path)) {
      TIDE_CHECK(it.value().is_object(), "config key '{}' must be an object with keys inside",
                 path);
      flatten(it.value(), path, flat);
    } else {
      unknown_key(path);
    }
  }
}

// Sets a dotted path in a JSON object, creating the sections on the way.
void set_path(json& j, const std::string& path, const json& value) {
  json* node = &j;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1) {
    node = &(*node)[path.substr(start, dot - start)];
    TIDE_CHECK(node->is_null() || node->is_object(),
               "cannot set '{}': config key '{}' is a JSON {} in the config file, not an object "
               "with keys inside",
               path, path.substr(0, dot), node->type_name());
  }
  (*node)[path.substr(start)] = value;
}

}  // namespace

TrainConfig parse_train_config(const json& j) {
  TIDE_CHECK(j.is_object(), "the config must be a JSON object {{...}}");
  std::map<std::string, json> v;
  for (const ConfigKey& k : config_schema()) v[k.path] = k.default_value;
  flatten(j, "", v);
  auto i = [&](const char* p) { return v.at(p).get<int64_t>(); };
  auto f = [&](const char* p) { return v.at(p).get<double>(); };
  auto s = [&](const char* p) { return v.at(p).get<std::string>(); };
  auto positive = [&](const char* p) {
    TIDE_CHECK(i(p) >= 1, "config key '{}' must be at least 1 (got {})", p, i(p));
    return i(p);
  };

  TrainConfig c;
  c.micro_batch = static_cast<int>(positive("train_micro_batch_size_per_gpu"));
  c.grad_accum = static_cast<int>(positive("gradient_accumulation_steps"));
  c.train_batch_size = static_cast<int>(i("train_batch_size"));
  c.seq_len = static_cast<int>(positive("seq_len"));
  c.train_steps = positive("train_steps");
  c.seed = static_cast<uint64_t>(i("seed"));
  c.device = s("device");
  c.threads = static_cast<int>(i("threads"));
  TIDE_CHECK(s("optimizer.type") == "AdamW" || s("optimizer.type") == "adamw",
             "optimizer.type '{}' is not supported; use AdamW", s("optimizer.type"));
  c.lr = f("optimizer.params.lr");
  TIDE_CHECK(c.lr > 0, "optimizer.params.lr must be positive (got {})", c.lr);
  c.beta1 = v.at("optimizer.params.betas")[0].get<double>();
  c.beta2 = v.at("optimizer.params.betas")[1].get<double>();
  TIDE_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1,
             "optimizer.params.betas must both be in [0, 1) (got [{}, {}])", c.beta1, c.beta2);
  c.eps = f("optimizer.params.eps");
  c.weight_decay = f("optimizer.params.weight_decay");
  TIDE_CHECK(s("scheduler.type") == "WarmupCosineLR",
             "scheduler.type '{}' is not supported; use WarmupCosineLR", s("scheduler.type"));
  c.decay_steps = i("scheduler.params.total_num_steps");
  if (c.decay_steps == 0) c.decay_steps = c.train_steps;
  c.warmup_steps = i("scheduler.params.warmup_num_steps");
  if (c.warmup_steps < 0) c.warmup_steps = c.decay_steps / 10;
  TIDE_CHECK(c.warmup_steps < c.decay_steps,
             "scheduler.params.warmup_num_steps ({}) must be below the decay steps ({}: "
             "scheduler.params.total_num_steps, or train_steps when 0)",
             c.warmup_steps, c.decay_steps);
  c.min_lr_ratio = static_cast<float>(f("scheduler.params.cos_min_ratio"));
  c.grad_clip = static_cast<float>(f("gradient_clipping"));
  TIDE_CHECK(c.grad_clip >= 0, "gradient_clipping must be >= 0 (got {}); 0 turns it off",
             c.grad_clip);
  c.bf16 = v.at("bf16.enabled").get<bool>();
  c.fp16 = v.at("fp16.enabled").get<bool>();
  TIDE_CHECK(!(c.bf16 && c.fp16), "bf16.enabled and fp16.enabled cannot both be true");
  c.zero_stage = static_cast<int>(i("zero_optimization.stage"));
  TIDE_CHECK(c.zero_stage == 0,
             "zero_optimization.stage {} is not available yet; use 0 (data parallel)",
             c.zero_stage);
  c.activation_policy = parse_activation_policy(s("activation_checkpointing.policy"));
  c.chunk_size_mb = f("chunk_size_mb");
  TIDE_CHECK(c.chunk_size_mb >= 0, "chunk_size_mb must be >= 0 (got {})", c.chunk_size_mb);

  c.model_preset = s("model.preset");
  if (!c.model_preset.empty()) {
    c.model = GPTConfig::preset(c.model_preset);
  } else {
    c.model.n_layer = static_cast<int>(i("model.n_layer"));
    c.model.n_head = static_cast<int>(i("model.n_head"));
    c.model.n_embd = static_cast<int>(i("model.n_embd"));
    c.model.vocab_size = static_cast<int>(i("model.vocab_size"));
    c.model.max_seq_len = static_cast<int>(i("model.max_seq_len"));
    if (c.model.max_seq_len == 0) c.model.max_seq_len = c.seq_len;
  }
  c.model.dropout = static_cast<float>(f("model.dropout"));
  TIDE_CHECK(c.seq_len <= c.model.max_seq_len,
             "seq_len {} exceeds model.max_seq_len {}; lower seq_len or raise model.max_seq_len",
             c.seq_len, c.model.max_seq_len);

  c.data_dir = s("data.dir");
  c.train_data = s("data.train");
  c.val_data = s("data.val");
  c.shuffle = v.at("data.shuffle").get<bool>();
  c.eval_interval = i("eval.interval");
  c.eval_sequences = positive("eval.sequences");
  c.log_interval = positive("log.interval");
  c.progress = v.at("log.progress").get<bool>();
  c.out_dir = s("out_dir");
  c.checkpoint_interval = i("checkpoint.interval");
  c.resume = s("checkpoint.resume");
  c.is_default_run = c.data_dir.empty() && c.train_data.empty();
  return c;
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  json j = json::object();
  if (!path.empty()) {
    std::ifstream f(path);
    TIDE_CHECK(f.good(), "cannot open config file '{}'; check the path", path);
    try {
      j = json::parse(f);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
      TIDE_FAIL("config file '{}' is not valid JSON: {}", path, e.what());
    }
    TIDE_CHECK(j.is_object(), "config file '{}' must hold a JSON object {{...}}, not a JSON {}",
               path, j.type_name());
  }
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    TIDE_CHECK(eq != std::string::npos && eq > 0,
               "override '{}' must look like key=value, e.g. optimizer.params.lr=3e-4", o);
    const std::string key = o.substr(0, eq), text = o.substr(eq + 1);
    if (!find_key(key)) unknown_key(key);
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
  return parse_train_config(j);
}

json config_to_json(const TrainConfig& c) {
  json j;
  j["train_micro_batch_size_per_gpu"] = c.micro_batch;
  j["gradient_accumulation_steps"] = c.grad_accum;
  j["seq_len"] = c.seq_len;
  j["train_steps"] = c.train_steps;
  j["seed"] = c.seed;
  j["device"] = c.device;
  j["optimizer"] = {{"type", "AdamW"},
                    {"params",
                     {{"lr", c.lr},
                      {"betas", {c.beta1, c.beta2}},
                      {"eps", c.eps},
                      {"weight_decay", c.weight_decay}}}};
  j["scheduler"] = {{"type", "WarmupCosineLR"},
                    {"params",
                     {{"warmup_num_steps", c.warmup_steps},
                      {"total_num_steps", c.decay_steps},
                      {"cos_min_ratio", c.min_lr_ratio}}}};
  j["gradient_clipping"] = c.grad_clip;
  j["activation_checkpointing"] = {{"policy", activation_policy_name(c.activation_policy)}};
  j["model"] = {{"n_layer", c.model.n_layer},         {"n_head", c.model.n_head},
                {"n_embd", c.model.n_embd},           {"vocab_size", c.model.vocab_size},
                {"max_seq_len", c.model.max_seq_len}, {"dropout", c.model.dropout}};
  j["data"] = {
      {"dir", c.data_dir}, {"train", c.train_data}, {"val", c.val_data}, {"shuffle", c.shuffle}};
  j["out_dir"] = c.out_dir;
  return j;
}

std::string config_reference_markdown() {
  std::string s = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const ConfigKey& k : config_schema())
    s += fmt::format("| `{}` | {} | `{}` | {} |\n", k.path, type_name(k.type),
                     k.default_value.dump(), k.doc);
  return s;
}

}  // namespace tide
