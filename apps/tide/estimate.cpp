// `tide estimate`: how much GPU and host memory one training configuration needs under every
// memory option (DDP, ZeRO-1/2/3, offload, recompute), side by side, and with --max-model the
// largest model of a shape family that fits a machine. See docs/estimate.md.
//
// Why one way in: the settings are the training config's keys. --config FILE is read by tide
// train's parser, every setting flag is an override of the key it stands for (key_flags(), the
// one table of them), and trailing key=value overrides set any other key; one TrainConfig is
// built from all of it and checked by the config's own rules, and the memory model's TrainSetup
// is derived from it (config/estimate_setup.h). Only what is not a training setting (the
// machine, the output, --max-model) is a plain flag.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "tide/config/estimate_setup.h"
#include "tide/core/byte_size.h"
#include "tide/core/error.h"
#include "tide/estimate/report.h"
#include "tide/memory/allocator.h"

namespace tide::app {
namespace {

constexpr int kPresetSeqCap = 8192;

using Overrides = std::vector<std::string>;

// A flag that stands for config keys: its value becomes key=value overrides.
struct KeyFlag {
  const char* flag;   // "--zero-stage"
  const char* value;  // the value's name in --help ("" for a switch)
  const char* keys;   // the key(s) it sets, as --help and --list-flags show them
  std::string help;
  // The overrides for a value; null: the one key `keys` = the value (a switch: = true).
  Overrides (*to_overrides)(const std::string& value) = nullptr;
};

Overrides precision_keys(const std::string& v) {
  // DeepSpeed's two switches; fp32 is neither.
  TIDE_CHECK(v == "bf16" || v == "fp16" || v == "fp32",
             "--precision '{}': use bf16 (bf16.enabled=true), fp16 (fp16.enabled=true) or fp32 "
             "(neither)",
             v);
  return {fmt::format("bf16.enabled={}", v == "bf16"), fmt::format("fp16.enabled={}", v == "fp16")};
}

Overrides offload_keys(const std::string& v) {
  const bool opt = v == "offload_optimizer" || v == "optimizer";
  const bool all = v == "offload_all" || v == "all";
  TIDE_CHECK(opt || all || v == "none",
             "--offload '{}': use none, offload_optimizer (zero_optimization.offload_optimizer."
             "device=cpu) or offload_all (offload_param.device=cpu as well)",
             v);
  // offload_param needs the optimizer on the host too (the config's rule).
  return {fmt::format("zero_optimization.offload_optimizer.device={}", opt || all ? "cpu" : "none"),
          fmt::format("zero_optimization.offload_param.device={}", all ? "cpu" : "none")};
}

Overrides byte_size_key(const std::string& v) {  // the key holds bytes; the flag takes units
  try {
    return {fmt::format("placement.device_memory_limit={}", parse_byte_size(v))};
  } catch (const Error& e) {
    TIDE_FAIL("--device-memory-limit (placement.device_memory_limit): {}", e.what());
  }
}

const std::vector<KeyFlag>& key_flags() {
  static const std::vector<KeyFlag> flags = {
      {"--model", "NAME", "model.preset",
       fmt::format("model preset: {} (without --seq the sequence length is the preset's "
                   "positions, at most {})",
                   fmt::join(GPTConfig::preset_names(), ", "), kPresetSeqCap)},
      {"--layers", "L", "model.n_layer", "transformer blocks"},
      {"--heads", "A", "model.n_head", "attention heads"},
      {"--hidden", "H", "model.n_embd", "hidden size"},
      {"--vocab", "V", "model.vocab_size", "vocabulary"},
      {"--seq", "S", "seq_len", "tokens per sequence (model.max_seq_len 0 follows it)"},
      {"--world-size", "N", "world_size", "GPUs in the job (= dp x tp x pp)"},
      {"--tp", "T", "tensor_parallel.size", "tensor-parallel degree"},
      {"--pp", "P", "pipeline.stages", "pipeline stages"},
      {"--sp", "", "tensor_parallel.sequence_parallel", "sequence parallelism (with --tp)"},
      {"--micro-batch", "B", "train_micro_batch_size_per_gpu", "sequences per micro-batch per GPU"},
      {"--grad-accum", "M", "gradient_accumulation_steps",
       "micro-batches per step (the pipeline's micro-batches)"},
      {"--zero-stage", "Z", "zero_optimization.stage", "the configured ZeRO stage (0-3), marked *"},
      {"--offload", "WHAT",
       "zero_optimization.offload_optimizer.device, zero_optimization.offload_param.device",
       "the configured offload: none, offload_optimizer (optimizer cpu) or offload_all (both cpu)",
       offload_keys},
      {"--recompute", "POLICY", "activation_checkpointing.policy",
       "the configured policy: none, selective, full"},
      {"--precision", "P", "bf16.enabled, fp16.enabled",
       "bf16 (the default without --config), fp16 or fp32 (neither key)", precision_keys},
      {"--schedule", "NAME", "pipeline.schedule",
       "1f1b, gpipe, interleaved, zb-h1, zb-h2, zb-auto, zb-1p, zb-2p, zb-v"},
      {"--memory-limit", "M", "pipeline.memory_limit",
       "zb-auto's activation limit per stage in micro-batches (0: p)"},
      {"--virtual-stages", "V", "pipeline.virtual_stages",
       "model chunks per stage (interleaved; zb-v: 2)"},
      {"--chunk-mb", "MIB", "chunk_size_mb",
       "target chunk size in MiB of f32 elements (0 = the largest parameter group)"},
      {"--placement", "POLICY", "placement.policy", "device or auto (PatrickStar)"},
      {"--device-memory-limit", "SIZE", "placement.device_memory_limit",
       "bytes one GPU may hold, with a unit (e.g. 40GiB)", byte_size_key},
  };
  return flags;
}

// The flag table as --list-flags prints it (docs/estimate.md shows it).
std::string key_flags_text() {
  size_t width = 0;
  for (const KeyFlag& f : key_flags())
    width = std::max(width, fmt::format("{} {}", f.flag, f.value).size());
  std::string out;
  for (const KeyFlag& f : key_flags())
    out += fmt::format("{:<{}}  {}\n", fmt::format("{} {}", f.flag, f.value), width, f.keys);
  return out;
}

struct EstimateArgs {
  std::string config, gpu_mem, host_mem, grow = "hidden";
  std::map<std::string, std::string> values;  // a key flag's value, by flag (a switch: none)
  std::vector<std::string> overrides;         // trailing key=value
  int gpus_per_host = 0;
  bool json = false, max_model = false, list_flags = false;
};

std::string key_of(const std::string& override) {
  return override.substr(0, override.find('='));
}

// The flags given, as overrides in table order, then the trailing key=value ones (which win).
Overrides user_overrides(const EstimateArgs& a, const CLI::App& cmd) {
  Overrides out;
  for (const KeyFlag& f : key_flags()) {
    if (cmd.get_option(f.flag)->count() == 0) continue;
    const std::string v = *f.value ? a.values.at(f.flag) : "true";
    if (f.to_overrides) {
      for (std::string& o : f.to_overrides(v)) out.push_back(std::move(o));
    } else {
      out.push_back(fmt::format("{}={}", f.keys, v));
    }
  }
  out.insert(out.end(), a.overrides.begin(), a.overrides.end());
  return out;
}

// What the estimate assumes where neither a config file nor the user says (tide train's
// defaults are a toy run): GPT-2 124M at its 1024 positions, one sequence per micro-batch,
// bf16. Each default is left out when the user gives one of its keys.
Overrides estimate_defaults(const Overrides& user) {
  auto given = [&](std::initializer_list<const char*> keys) {
    return std::ranges::any_of(user, [&](const std::string& o) {
      return std::ranges::find(keys, key_of(o)) != keys.end();
    });
  };
  Overrides out;
  if (!given({"model.preset", "init_from"})) {  // a shape the flags may change one by one
    const GPTConfig m = GPTConfig::preset("gpt2-124m");
    out = {fmt::format("model.n_layer={}", m.n_layer), fmt::format("model.n_head={}", m.n_head),
           fmt::format("model.n_embd={}", m.n_embd),
           fmt::format("model.vocab_size={}", m.vocab_size),
           fmt::format("seq_len={}", m.max_seq_len)};
  }
  if (!given({"bf16.enabled", "fp16.enabled"})) out.push_back("bf16.enabled=true");
  // A train_batch_size given derives the one of these two left out (DeepSpeed's rule).
  if (!given({"train_micro_batch_size_per_gpu", "train_batch_size"}))
    out.push_back("train_micro_batch_size_per_gpu=1");
  if (!given({"gradient_accumulation_steps", "train_batch_size"}))
    out.push_back("gradient_accumulation_steps=1");
  return out;
}

// A preset's positions are its context length (Llama 3.1's 131072), not a training length:
// without a sequence length given the estimate takes at most kPresetSeqCap of them.
Overrides preset_seq_len(const Overrides& user) {
  std::string preset;
  bool seq_given = false;
  for (const std::string& o : user) {
    if (key_of(o) == "model.preset") preset = o.substr(o.find('=') + 1);
    seq_given |= key_of(o) == "seq_len";
  }
  if (preset.empty() || seq_given) return {};
  return {
      fmt::format("seq_len={}", std::min(GPTConfig::preset(preset).max_seq_len, kPresetSeqCap))};
}

// The config's error, with the flags that set the keys it names (the user typed those).
[[noreturn]] void rethrow_naming_flags(const Error& e, const EstimateArgs& a, const CLI::App& cmd) {
  std::string msg = e.what();
  for (const KeyFlag& f : key_flags()) {
    if (cmd.get_option(f.flag)->count() == 0) continue;
    const std::string key = std::string(f.keys).substr(0, std::string(f.keys).find(','));
    if (msg.find(key) == std::string::npos) continue;
    msg += *f.value ? fmt::format(" [{} {} sets {}]", f.flag, a.values.at(f.flag), f.keys)
                    : fmt::format(" [{} sets {}]", f.flag, f.keys);
  }
  throw Error(msg);
}

// One config from everything given, and the setup derived from it.
TrainSetup build_setup(const EstimateArgs& a, const CLI::App& cmd) {
  const Overrides user = user_overrides(a, cmd);
  // Lowest precedence first: the estimate's defaults (without a file), the preset's sequence
  // length, then what the user gave.
  Overrides all = a.config.empty() ? estimate_defaults(user) : Overrides{};
  TrainSetup s;
  try {
    for (const Overrides& part : {preset_seq_len(user), user})
      all.insert(all.end(), part.begin(), part.end());
    const TrainConfig tc = load_train_config(a.config, all, /*check_paths=*/false);
    if (const std::string w = ignored_keys_warning(tc); !w.empty()) fmt::print(stderr, "{}\n", w);
    s = setup_from_train_config(tc);
  } catch (const Error& e) {
    rethrow_naming_flags(e, a, cmd);
  }
  s.gpus_per_host = a.gpus_per_host;
  TIDE_CHECK(s.model.vocab_size > 0,
             "model.vocab_size is 0{} (the data's tokenizer), and its data.dir has no meta.json "
             "to read it from; set model.vocab_size in the config, or pass --vocab",
             a.config.empty() ? "" : " in " + a.config);
  return s;
}

void run_estimate(const EstimateArgs& a, const CLI::App& cmd) {
  if (a.list_flags) {
    fmt::print("{}", key_flags_text());
    return;
  }
  TrainSetup setup = build_setup(a, cmd);
  MachineBudget budget;
  if (!a.gpu_mem.empty()) budget.gpu_bytes = parse_byte_size(a.gpu_mem);
  if (!a.host_mem.empty()) budget.host_bytes = parse_byte_size(a.host_mem);
  // placement.policy=auto without a limit (device=cuda; the config check refuses it elsewhere):
  // the budget tide train would take on an empty GPU of --gpu-mem.
  if (setup.placement == Placement::Auto && setup.device_memory_limit == 0) {
    TIDE_CHECK(budget.gpu_bytes > 0,
               "placement.policy=auto on a GPU takes its budget from the GPU's free memory: give "
               "the GPU's memory with --gpu-mem (e.g. 80GiB), or placement.device_memory_limit");
    setup.device_memory_limit = default_auto_device_limit({budget.gpu_bytes, budget.gpu_bytes});
  }
  if (a.max_model) {
    const GrowthFamily family = parse_growth_family(a.grow);
    const auto rows = find_max_models(setup, budget, family);
    if (a.json) {
      fmt::print("{}\n", max_model_json(setup, budget, family, rows).dump());
    } else {
      fmt::print("{}", max_model_text(setup, budget, family, rows));
    }
    return;
  }
  const auto rows = compare_options(setup, budget);
  if (a.json) {
    fmt::print("{}\n", options_table_json(setup, budget, rows).dump());
  } else {
    fmt::print("{}", options_table_text(setup, budget, rows));
  }
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  auto args = std::make_shared<EstimateArgs>();
  auto* cmd = app.add_subcommand(
      "estimate",
      "memory per GPU and per host of a training setup under every memory option "
      "(DDP, ZeRO-1/2/3, offload, recompute); --max-model finds the largest model that fits. "
      "Every setting flag sets a config key (--list-flags), and key=value sets any key");
  cmd->add_option("--config", args->config,
                  "training config (JSON), read as `tide train` reads it: unknown keys are errors; "
                  "flags and key=value given as well override its keys")
      ->check(CLI::ExistingFile);
  for (const KeyFlag& f : key_flags()) {
    const std::string help = fmt::format("{} ({})", f.help, f.keys);
    if (*f.value) {
      cmd->add_option(f.flag, args->values[f.flag], help)->type_name(f.value);
    } else {
      cmd->add_flag(f.flag, help);  // given or not: user_overrides reads its count
    }
  }
  cmd->add_option("overrides", args->overrides,
                  "key=value: any config key (docs/config.md), after the flags (so it wins)");
  cmd->add_option("--gpus-per-host", args->gpus_per_host,
                  "GPUs sharing one host's memory (default min(world size, 8))")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--gpu-mem", args->gpu_mem, "memory of one GPU, e.g. 80GiB");
  cmd->add_option("--host-mem", args->host_mem, "memory of one host, e.g. 512GiB");
  cmd->add_flag("--json", args->json, "print JSON instead of a table");
  cmd->add_flag("--max-model", args->max_model,
                "find the largest model of the family (--grow) that fits --gpu-mem/--host-mem");
  cmd->add_option("--grow", args->grow,
                  "--max-model family: hidden (n_embd = 128k, layers fixed) or layers");
  cmd->add_flag("--list-flags", args->list_flags,
                "print each setting flag with the config key(s) it sets, and exit");
  cmd->callback([args, cmd] { run_estimate(*args, *cmd); });
}

}  // namespace tide::app
