// `tide estimate`: how much GPU and host memory one training configuration needs under every
// memory option (DDP, ZeRO-1/2/3, offload, recompute), side by side, and with --max-model the
// largest model of a shape family that fits a machine. See docs/estimate.md.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <string>

#include "commands.h"
#include "tide/config/estimate_setup.h"
#include "tide/core/byte_size.h"
#include "tide/core/error.h"
#include "tide/estimate/report.h"

namespace tide::app {
namespace {

constexpr int kPresetSeqCap = 8192;

struct EstimateArgs {
  std::string config, model, offload, recompute, precision, schedule, gpu_mem, host_mem;
  std::string placement, device_memory_limit;
  std::string grow = "hidden";
  int layers = 0, heads = 0, hidden = 0, vocab = 0, seq = 0;
  int world_size = 1, tp = 1, pp = 1, micro_batch = 1, grad_accum = 1, zero_stage = 0;
  int virtual_stages = 1, gpus_per_host = 0;
  double chunk_mb = 0, memory_limit = 0;
  bool sp = false, json = false, max_model = false;
};

// Config file first (if any, read by tide train's parser: config/estimate_setup.h), then every
// flag given on the command line on top of it.
TrainSetup build_setup(const EstimateArgs& a, const CLI::App& cmd) {
  auto given = [&](const char* flag) { return cmd.get_option(flag)->count() > 0; };
  TrainSetup s;
  s.model = GPTConfig::preset("gpt2-124m");
  if (!a.config.empty()) {
    // --world-size is the ranks that derive a batch size the config leaves out (DeepSpeed's rule).
    const TrainConfig tc = load_train_config(a.config, {}, /*check_paths=*/false,
                                             given("--world-size") ? a.world_size : 0);
    if (const std::string w = ignored_keys_warning(tc); !w.empty()) fmt::print(stderr, "{}\n", w);
    s = setup_from_train_config(tc);
  }
  if (given("--model")) {
    s.model = GPTConfig::preset(a.model);
    // A preset's positions are its context length (Llama 3.1's 131072), not a training length:
    // without --seq the estimate takes at most kPresetSeqCap of them.
    if (!given("--seq")) s.seq_len = std::min(s.model.max_seq_len, kPresetSeqCap);
  }
  if (given("--layers")) s.model.n_layer = a.layers;
  if (given("--heads")) s.model.n_head = a.heads;
  if (given("--hidden")) s.model.n_embd = a.hidden;
  if (given("--vocab")) s.model.vocab_size = a.vocab;
  if (given("--seq")) s.model.max_seq_len = s.seq_len = a.seq;
  if (given("--world-size")) s.world_size = a.world_size;
  if (given("--tp")) s.tp = a.tp;
  if (given("--pp")) s.pp = a.pp;
  if (given("--sp")) s.sp = a.sp;
  if (given("--micro-batch")) s.micro_batch = a.micro_batch;
  if (given("--grad-accum")) s.grad_accum = a.grad_accum;
  if (given("--zero-stage")) s.zero_stage = a.zero_stage;
  if (given("--offload")) s.offload = parse_offload(a.offload);
  if (given("--recompute")) s.recompute = parse_recompute(a.recompute);
  if (given("--precision")) s.precision = parse_precision(a.precision);
  if (given("--schedule")) s.schedule = parse_schedule(a.schedule);
  if (given("--virtual-stages")) s.virtual_stages = a.virtual_stages;
  // zb-v always runs two chunks per stage (as pipeline.virtual_stages defaults to in a config).
  if (given("--schedule") && s.schedule == Schedule::ZBV && s.pp > 1 && !given("--virtual-stages"))
    s.virtual_stages = 2;
  if (given("--memory-limit")) s.memory_limit = a.memory_limit;
  if (given("--chunk-mb")) s.chunk_mib = a.chunk_mb;
  if (given("--gpus-per-host")) s.gpus_per_host = a.gpus_per_host;
  if (given("--placement")) s.placement = parse_placement(a.placement);
  if (given("--device-memory-limit"))
    s.device_memory_limit = parse_byte_size(a.device_memory_limit);
  TIDE_CHECK(a.config.empty() || s.model.vocab_size > 0,
             "model.vocab_size is 0 in {} (the data's tokenizer), and its data.dir has no "
             "meta.json to read it from; set model.vocab_size in the config, or pass --vocab",
             a.config);
  s.validate();
  return s;
}

void run_estimate(const EstimateArgs& a, const CLI::App& cmd) {
  const TrainSetup setup = build_setup(a, cmd);
  MachineBudget budget;
  if (!a.gpu_mem.empty()) budget.gpu_bytes = parse_byte_size(a.gpu_mem);
  if (!a.host_mem.empty()) budget.host_bytes = parse_byte_size(a.host_mem);
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
      "(DDP, ZeRO-1/2/3, offload, recompute); --max-model finds the largest model that fits");
  cmd->add_option("--config", args->config,
                  "training config (JSON), read as `tide train` reads it: unknown keys are errors; "
                  "flags given as well override its keys")
      ->check(CLI::ExistingFile);
  cmd->add_option("--model", args->model,
                  fmt::format("model preset: {} (the sequence length, unless --seq, is the "
                              "preset's positions, at most {})",
                              fmt::join(GPTConfig::preset_names(), ", "), kPresetSeqCap));
  cmd->add_option("--layers", args->layers, "n_layer (overrides the preset)");
  cmd->add_option("--heads", args->heads, "n_head");
  cmd->add_option("--hidden", args->hidden, "n_embd");
  cmd->add_option("--vocab", args->vocab, "vocab_size");
  cmd->add_option("--seq", args->seq, "sequence length (seq_len and max_seq_len)");
  cmd->add_option("--world-size", args->world_size, "GPUs in the job (= dp * tp * pp)");
  cmd->add_option("--tp", args->tp, "tensor-parallel degree");
  cmd->add_option("--pp", args->pp, "pipeline stages");
  cmd->add_flag("--sp", args->sp, "sequence parallelism (with --tp)");
  cmd->add_option("--micro-batch", args->micro_batch, "sequences per micro-batch per GPU");
  cmd->add_option("--grad-accum", args->grad_accum,
                  "micro-batches per step (the pipeline's micro-batches)");
  cmd->add_option("--zero-stage", args->zero_stage, "the configured ZeRO stage (0-3), marked *");
  cmd->add_option("--offload", args->offload,
                  "the configured placement: none, offload_optimizer, offload_all");
  cmd->add_option("--recompute", args->recompute, "the configured policy: none, selective, full");
  cmd->add_option("--precision", args->precision, "bf16 (default), fp16 or fp32");
  cmd->add_option("--schedule", args->schedule,
                  "pipeline schedule: 1f1b (default), gpipe, interleaved, zb-h1, zb-h2, zb-auto, "
                  "zb-1p, zb-2p, zb-v");
  cmd->add_option("--memory-limit", args->memory_limit,
                  "zb-auto's activation limit per stage in micro-batches (0: p)");
  cmd->add_option("--virtual-stages", args->virtual_stages,
                  "model chunks per stage for the interleaved schedule");
  cmd->add_option("--chunk-mb", args->chunk_mb,
                  "target chunk size in MiB of f32 elements, as tide train's chunk_size_mb "
                  "(0 = the largest tensor)");
  cmd->add_option("--gpus-per-host", args->gpus_per_host,
                  "GPUs sharing one host's memory (default min(world size, 8))");
  cmd->add_option("--placement", args->placement,
                  "placement.policy: device (default) or auto (PatrickStar: states beyond the "
                  "limit on the host)");
  cmd->add_option("--device-memory-limit", args->device_memory_limit,
                  "placement.device_memory_limit: bytes one GPU may hold, e.g. 40GiB; the "
                  "configured option is checked against it");
  cmd->add_option("--gpu-mem", args->gpu_mem, "memory of one GPU, e.g. 80GiB");
  cmd->add_option("--host-mem", args->host_mem, "memory of one host, e.g. 512GiB");
  cmd->add_flag("--json", args->json, "print JSON instead of a table");
  cmd->add_flag("--max-model", args->max_model,
                "find the largest model of the family (--grow) that fits --gpu-mem/--host-mem");
  cmd->add_option("--grow", args->grow,
                  "--max-model family: hidden (n_embd = 128k, layers fixed) or layers");
  cmd->callback([args, cmd] { run_estimate(*args, *cmd); });
}

}  // namespace tide::app
