#include "tide/config/config.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "tide/checkpoint/checkpoint_meta.h"
#include "tide/checkpoint/init_from.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/config/check_settings.h"
#include "tide/config/pipeline_setup.h"
#include "tide/core/device.h"
#include "tide/core/error.h"
#include "tide/core/json_error.h"
#include "tide/optim/lr_schedule.h"

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
// KeyUse of DeepSpeed's keys that cannot change a tide run, and of those DeepSpeed refuses.
constexpr KeyUse kIgnored = KeyUse::IGNORED, kRefused = KeyUse::REFUSED;

// The parsers and setters of the table's fields (ConfigField) that check a value: each throws
// the key's error for a value its type and range let through.

std::string device_name(const std::string& d) {
  try {
    if (d != "auto") parse_device(d);
  } catch (const Error&) {
    TIDE_FAIL("device '{}' is not a device; use cpu, cuda, cuda:N, sim, sim:N or auto", d);
  }
  return d;
}

void set_betas(TrainConfig& c, const json& v) {
  c.beta1 = v[0].get<double>();
  c.beta2 = v[1].get<double>();
}

bool is_dtype_name(const std::string& t) {
  return t.empty() || t == "fp32" || t == "bf16" || t == "fp16";
}
std::string grad_accum_dtype_name(const std::string& t) {
  TIDE_CHECK(is_dtype_name(t),
             "data_types.grad_accum_dtype must be \"fp32\", \"bf16\", \"fp16\" or empty "
             "(DeepSpeed's default) (got \"{}\")",
             t);
  return t;
}
std::string comm_dtype_name(const std::string& t) {
  TIDE_CHECK(is_dtype_name(t),
             "communication_data_type must be \"fp32\", \"bf16\", \"fp16\" or empty "
             "(DeepSpeed's default: the parameters' dtype) (got \"{}\")",
             t);
  return t;
}

void require_contiguous_gradients(TrainConfig&, const json& v) {
  TIDE_CHECK(v.get<bool>(),
             "zero_optimization.contiguous_gradients = false is not available: tide's gradients "
             "always live in contiguous chunks; remove the key or set it to true");
}

std::string offload_device(const char* key, const std::string& d) {
  TIDE_CHECK(d == "none" || d == "cpu",
             "config key '{}' must be \"cpu\" or \"none\" (got \"{}\"){}", key, d,
             d == "nvme" ? "; tide has no NVMe offload (DeepSpeed's ZeRO-Infinity)" : "");
  return d;
}
void set_offload_optimizer(TrainConfig& c, const json& v) {
  c.offload_optimizer =
      offload_device("zero_optimization.offload_optimizer.device", v.get<std::string>());
  c.zero.offload_optimizer.enabled = c.offload_optimizer == "cpu";  // ZeRO-Offload's switch
}
std::string offload_param_device(const std::string& d) {
  return offload_device("zero_optimization.offload_param.device", d);
}

std::string placement_policy_name(const std::string& p) {
  TIDE_CHECK(p == "device" || p == "auto",
             "placement.policy must be \"device\" or \"auto\" (got \"{}\")", p);
  return p;
}

std::string non_empty_out_dir(const std::string& d) {
  TIDE_CHECK(!d.empty(), "out_dir is empty; name a directory, e.g. out_dir=runs/mine");
  return d;
}

std::string tensorboard_job_name(const std::string& j) {
  TIDE_CHECK(j.find('/') == std::string::npos && j != "." && j != "..",
             "tensorboard.job_name '{}' must be one directory name (no '/'); put the parent "
             "directories in tensorboard.output_path",
             j);
  return j;
}

}  // namespace

const std::vector<ConfigKey>& config_schema() {
  using T = ConfigType;
  static const std::vector<ConfigKey> keys = {
      {"train_micro_batch_size_per_gpu", &TrainConfig::micro_batch, T::INT, 8,
       "sequences per micro-batch on each rank; when left out and train_batch_size is given: "
       "train_batch_size / (data-parallel ranks x gradient_accumulation_steps), as in DeepSpeed",
       ints(1, 65536)},
      {"gradient_accumulation_steps", &TrainConfig::grad_accum, T::INT, 1,
       "micro-batches accumulated per optimizer step; when left out and train_batch_size and "
       "the micro-batch are given: train_batch_size / (micro-batch x data-parallel ranks), as "
       "in DeepSpeed",
       ints(1, 65536)},
      {"train_batch_size", &TrainConfig::train_batch_size, T::INT, 0,
       "sequences per optimizer step over all ranks: must equal micro-batch x "
       "gradient_accumulation_steps x data-parallel ranks (a left-out one of those two is "
       "derived from it, as in DeepSpeed); 0 = not given",
       ints(0, 2147483647)},
      {"seq_len", &TrainConfig::seq_len, T::INT, 128,
       "tokens per sequence (at most model.max_seq_len)", ints(1, 1048576)},
      {"train_steps", &TrainConfig::train_steps, T::INT, 150, "optimizer steps to run", ints(1)},
      {"seed", &TrainConfig::seed, T::UINT, 1337,
       "seed of weight initialisation, data order and dropout"},
      {"device",
       {device_name, &TrainConfig::device},
       T::STRING,
       "cpu",
       "where the model's ops and memory are: cpu; cuda or cuda:N, a GPU (f32, bf16 or fp16, "
       "data parallel over NCCL with ZeRO 0-3, offload and auto placement; with several ranks "
       "on a machine, cuda is each rank's own GPU, docs/launch.md; not yet run on one); sim or "
       "sim:N, the "
       "simulated asynchronous device (a stream thread and its own memory, reached only "
       "through copies) runs every technique; auto = cpu until a GPU run has been checked"},
      {"threads", &TrainConfig::threads, T::INT, 0, "OpenMP threads per rank; 0 = OpenMP's default",
       ints(0, 4096)},
      {"optimizer.type",
       {},
       T::STRING,
       "AdamW",
       "Adam or AdamW, in any case (as DeepSpeed reads them): Adam is AdamW unless "
       "optimizer.params.adam_w_mode is false; SGD (no optimizer state) only for tide estimate: "
       "tide train refuses it"},
      {"optimizer.params.adam_w_mode",
       {},
       T::BOOL,
       true,
       "with optimizer.type Adam: true = AdamW's decoupled weight decay, false = classic Adam "
       "with L2 regularisation (the decay added to the gradient); type AdamW is AdamW whatever "
       "this says (as in DeepSpeed)"},
      {"optimizer.params.torch_adam",
       {},
       T::BOOL,
       false,
       "DeepSpeed: torch's Adam instead of its fused kernel, the same update; ignored",
       {},
       kIgnored},
      {"optimizer.params.max_grad_norm",
       {},
       T::FLOAT,
       0.0,
       "refused, as DeepSpeed refuses it: not an optimizer parameter; clip with "
       "gradient_clipping instead",
       {},
       kRefused},
      {"optimizer.params.lr", &TrainConfig::lr, T::FLOAT, 1e-3, "peak learning rate",
       nums(0, true)},
      {"optimizer.params.betas", set_betas, T::FLOAT_PAIR, json::array({0.9, 0.95}),
       "Adam beta1, beta2", nums(0, false, 1, true)},
      {"optimizer.params.eps", &TrainConfig::eps, T::FLOAT, 1e-8, "Adam epsilon", nums(0, true)},
      {"optimizer.params.weight_decay", &TrainConfig::weight_decay, T::FLOAT, 0.1,
       "weight decay of the matrices and embeddings (decoupled; L2 with adam_w_mode false)",
       nums(0, false)},
      {"scheduler.type",
       {parse_lr_schedule_type, &TrainConfig::lr_schedule, &LrSchedule::type},
       T::STRING,
       "WarmupCosineLR",
       "WarmupCosineLR, WarmupDecayLR or WarmupLR (DeepSpeed's formulas and defaults, see "
       "docs/optimizer.md), or none: constant optimizer.params.lr"},
      {"scheduler.params.warmup_min_lr",
       {&TrainConfig::lr_schedule, &LrSchedule::warmup_min_lr},
       T::FLOAT,
       0.0,
       "WarmupLR, WarmupDecayLR: lr at the start of the warmup",
       nums(0, false)},
      {"scheduler.params.warmup_max_lr",
       {&TrainConfig::lr_schedule, &LrSchedule::warmup_max_lr},
       T::FLOAT,
       -1.0,
       "WarmupLR, WarmupDecayLR: lr at the end of the warmup; -1 = DeepSpeed's default: "
       "optimizer.params.lr for WarmupLR, 0.001 for WarmupDecayLR",
       nums(-1, false)},
      {"scheduler.params.warmup_num_steps",
       {&TrainConfig::lr_schedule, &LrSchedule::warmup_num_steps},
       T::INT,
       1000,
       "warmup steps (counted as at least 2, as in DeepSpeed); -1 (tide's, not DeepSpeed's) = "
       "10% of total_num_steps",
       ints(-1)},
      {"scheduler.params.warmup_type",
       {parse_warmup_type, &TrainConfig::lr_schedule, &LrSchedule::warmup_type},
       T::STRING,
       "log",
       "log or linear: how the warmup rises (log: the first two steps at its start)"},
      {"scheduler.params.total_num_steps",
       {&TrainConfig::lr_schedule, &LrSchedule::total_num_steps},
       T::INT,
       0,
       "WarmupDecayLR, WarmupCosineLR: step where the decay reaches its end; 0 = train_steps",
       ints(0)},
      {"scheduler.params.cos_min_ratio",
       {&TrainConfig::lr_schedule, &LrSchedule::cos_min_ratio},
       T::FLOAT,
       0.0001,
       "WarmupCosineLR: floor of the cosine as a fraction of optimizer.params.lr",
       nums(0, false, 1, false)},
      {"scheduler.params.warmup_min_ratio",
       {&TrainConfig::lr_schedule, &LrSchedule::warmup_min_ratio},
       T::FLOAT,
       0.0,
       "WarmupCosineLR: start of the warmup as a fraction of optimizer.params.lr",
       nums(0, false, 1, false)},
      {"gradient_clipping", &TrainConfig::grad_clip, T::FLOAT, 1.0,
       "clip the global gradient norm to this; 0 = off", nums(0, false)},
      {"bf16.enabled", &TrainConfig::bf16, T::BOOL, false,
       "bf16 parameters, gradients and compute, with f32 master weights and Adam states "
       "(DeepSpeed's bf16; docs/optimizer.md#mixed-precision)"},
      {"data_types.grad_accum_dtype",
       {grad_accum_dtype_name, &TrainConfig::grad_accum_dtype},
       T::STRING,
       "",
       "the gradients' dtype (accumulation and reduction): fp32, bf16 or fp16; empty = "
       "DeepSpeed's default: fp32 for bf16 without ZeRO (zero_optimization.stage 0), else the "
       "parameters' dtype"},
      {"communication_data_type",
       {comm_dtype_name, &TrainConfig::communication_data_type},
       T::STRING,
       "",
       "the dtype the data-parallel gradient reductions send (all-reduce, reduce-scatter): fp32, "
       "bf16 or fp16; the gradients are converted to it and back. Empty = DeepSpeed's default: "
       "fp16 with fp16.enabled, bf16 with bf16.enabled, else fp32 "
       "(docs/optimizer.md#mixed-precision)"},
      {"fp16.enabled", &TrainConfig::fp16, T::BOOL, false,
       "fp16 parameters, gradients and compute, f32 master weights and Adam states, with "
       "DeepSpeed's loss scaling (the fp16.* keys below; docs/optimizer.md#mixed-precision)"},
      {"fp16.auto_cast",
       {&TrainConfig::fp16_loss_scale, &Fp16LossScale::auto_cast},
       T::BOOL,
       false,
       "with fp16.enabled: cast the inputs to fp16 (DeepSpeed)"},
      {"fp16.loss_scale",
       {&TrainConfig::fp16_loss_scale, &Fp16LossScale::loss_scale},
       T::FLOAT,
       0.0,
       "with fp16.enabled: 0 = dynamic loss scaling, else this fixed scale",
       nums(0, false)},
      {"fp16.initial_scale_power",
       {&TrainConfig::fp16_loss_scale, &Fp16LossScale::initial_scale_power},
       T::INT,
       16,
       "with fp16.enabled: dynamic loss scaling starts at 2^initial_scale_power",
       ints(0, 127)},
      {"fp16.loss_scale_window",
       {&TrainConfig::fp16_loss_scale, &Fp16LossScale::loss_scale_window},
       T::INT,
       1000,
       "with fp16.enabled: steps without overflow before the dynamic scale doubles",
       ints(1)},
      {"fp16.hysteresis",
       {&TrainConfig::fp16_loss_scale, &Fp16LossScale::hysteresis},
       T::INT,
       2,
       "with fp16.enabled: overflows tolerated before the dynamic scale halves (delayed shift)",
       ints(1, 65536)},
      {"fp16.consecutive_hysteresis",
       {&TrainConfig::fp16_loss_scale, &Fp16LossScale::consecutive_hysteresis},
       T::BOOL,
       false,
       "with fp16.enabled: refill the hysteresis after every step without overflow"},
      {"fp16.min_loss_scale",
       {&TrainConfig::fp16_loss_scale, &Fp16LossScale::min_loss_scale},
       T::FLOAT,
       1.0,
       "with fp16.enabled: the floor of the dynamic loss scale",
       nums(0, true)},
      {"zero_optimization.stage",
       {&TrainConfig::zero, &ZeroSettings::stage},
       T::INT,
       0,
       "ZeRO stage: 0 = data parallel (DDP), 1 = partition optimizer states, 2 = + gradients, "
       "3 = + parameters (docs/zero.md)",
       ints(0, 3)},
      {"zero_optimization.reduce_bucket_size",
       {&TrainConfig::zero, &ZeroSettings::reduce_bucket_size},
       T::INT,
       500000000,
       "stages 1-3: gradient elements being reduce-scattered at once, in flight behind "
       "backward (a larger chunk is reduced alone, at once)",
       ints(1)},
      {"zero_optimization.allgather_bucket_size",
       {&TrainConfig::zero, &ZeroSettings::allgather_bucket_size},
       T::INT,
       500000000,
       "stages 1-2: parameter elements being all-gathered at once after the step (a larger "
       "chunk is gathered alone)",
       ints(1)},
      {"zero_optimization.overlap_comm",
       {&TrainConfig::zero, &ZeroSettings::overlap_comm},
       T::BOOL,
       true,
       "stages 1-3: reduce-scatter gradients asynchronously, overlapping backward; false = "
       "each reduction blocks"},
      {"zero_optimization.contiguous_gradients", require_contiguous_gradients, T::BOOL, true,
       "gradients live in contiguous chunks (always; false is refused)"},
      {"zero_optimization.allgather_partitions",
       {},
       T::BOOL,
       true,
       "DeepSpeed: all-gather (true) or broadcasts (false) of the updated partitions, the same "
       "parameters either way; ignored (tide all-gathers)",
       {},
       kIgnored},
      {"zero_optimization.reduce_scatter",
       {},
       T::BOOL,
       true,
       "DeepSpeed: reduce-scatter (true) or all-reduce (false) of the gradients, the same "
       "averages either way; ignored (tide reduce-scatters)",
       {},
       kIgnored},
      {"zero_optimization.stage3_max_reuse_distance",
       {},
       T::INT,
       1000000000,
       "DeepSpeed: keep a gathered parameter reused within this many elements, a memory/speed "
       "trade; ignored (tide's stage 3 keeps stage3_max_live_parameters)",
       ints(0),
       kIgnored},
      {"zero_optimization.sub_group_size",
       {},
       T::INT,
       1000000000,
       "DeepSpeed: parameter elements per optimizer-step group, a memory/speed trade; ignored "
       "(tide steps chunk by chunk)",
       ints(0),
       kIgnored},
      {"zero_optimization.round_robin_gradients",
       {},
       T::BOOL,
       false,
       "DeepSpeed: order of the gradient copies to the host with offload; ignored",
       {},
       kIgnored},
      {"zero_optimization.load_from_fp32_weights",
       {},
       T::BOOL,
       true,
       "DeepSpeed: restore the master weights from fp32 copies; ignored (tide's checkpoints "
       "always hold the f32 master weights)",
       {},
       kIgnored},
      {"zero_optimization.ignore_unused_parameters",
       {},
       T::BOOL,
       true,
       "DeepSpeed: tolerate parameters without gradients; ignored (the GPT uses them all)",
       {},
       kIgnored},
      {"zero_optimization.grad_hooks",
       {},
       T::BOOL,
       true,
       "DeepSpeed: stage 1 reduces during backward; ignored (tide reduces behind backward with "
       "overlap_comm)",
       {},
       kIgnored},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save",
       {},
       T::BOOL,
       false,
       "DeepSpeed: gather the 16-bit weights into save_16bit_model(); ignored (tide export "
       "gathers every checkpoint)",
       {},
       kIgnored},
      {"zero_optimization.cpu_offload",
       {},
       T::BOOL,
       false,
       "DeepSpeed's deprecated spelling of offload_optimizer.device: true = \"cpu\" (giving "
       "both is an error, as in DeepSpeed)"},
      {"zero_optimization.cpu_offload_params",
       {},
       T::BOOL,
       false,
       "DeepSpeed's deprecated spelling of offload_param.device: true = \"cpu\" (giving both "
       "is an error, as in DeepSpeed)"},
      {"zero_allow_untested_optimizer",
       {},
       T::BOOL,
       false,
       "DeepSpeed: allow a client optimizer under ZeRO; ignored (tide's optimizers are its own)",
       {},
       kIgnored},
      {"zero_force_ds_cpu_optimizer",
       {},
       T::BOOL,
       true,
       "DeepSpeed: insist on its CPU Adam with offload; ignored (tide's offload runs its own)",
       {},
       kIgnored},
      {"zero_optimization.stage3_prefetch_bucket_size",
       {&TrainConfig::zero, &ZeroSettings::prefetch_bucket_size},
       T::INT,
       50000000,
       "stage 3: parameter elements gathered ahead of the op that uses them; 0 = no prefetch",
       ints(0)},
      {"zero_optimization.stage3_max_live_parameters",
       {&TrainConfig::zero, &ZeroSettings::max_live_parameters},
       T::INT,
       1000000000,
       "stage 3: most parameter elements gathered at once (at least the chunks of one op's "
       "parameters)",
       ints(1)},
      {"zero_optimization.stage3_param_persistence_threshold",
       {&TrainConfig::zero, &ZeroSettings::param_persistence_threshold},
       T::INT,
       100000,
       "stage 3: chunks of at most this many elements stay gathered",
       ints(0)},
      // Offload and the parallel layout: `tide estimate` sizes them; `tide train` refuses a
      // value it cannot run yet, naming it (config/unsupported_settings.h).
      {"zero_optimization.offload_optimizer.device", set_offload_optimizer, T::STRING, "none",
       "none or cpu (ZeRO-Offload: fp32 master weights and Adam states on the host, CPU Adam; "
       "needs stage >= 1; docs/zero.md#offload)"},
      {"zero_optimization.offload_optimizer.pin_memory",
       {&TrainConfig::zero, &ZeroSettings::offload_optimizer, &OffloadSettings::pin_memory},
       T::BOOL,
       true,
       "with offload_optimizer cpu on a GPU: the host ends of the copies (the gradient slices, "
       "the parameters going up) in page-locked memory, so the copies overlap compute (false: "
       "pageable, each copy blocks the host; DeepSpeed's default); nothing to pin on CPU"},
      {"zero_optimization.offload_optimizer.delayed_update",
       {&TrainConfig::zero, &ZeroSettings::offload_optimizer, &OffloadSettings::delayed_update},
       T::BOOL,
       false,
       "with offload_optimizer cpu: one-step delayed parameter update (DPU): after the warm-up, "
       "step t's CPU Adam runs during step t+1, which uses the parameters of step t-1"},
      {"zero_optimization.offload_optimizer.dpu_warmup_steps",
       {&TrainConfig::zero, &ZeroSettings::offload_optimizer, &OffloadSettings::dpu_warmup_steps},
       T::INT,
       200,
       "with delayed_update: the first steps, updated synchronously (the paper used 40; on the "
       "default job 40 costs +3.7% final validation loss, 200 +0.7%: docs/zero.md#offload)",
       ints(0)},
      {"zero_optimization.offload_param.device",
       {offload_param_device, &TrainConfig::offload_param},
       T::STRING,
       "none",
       "none or cpu (parameters on the host too, gathered per op into the compute tier on "
       "use; needs stage 3 and offload_optimizer cpu; any number of data-parallel ranks)"},
      {"zero_optimization.offload_param.pin_memory", &TrainConfig::offload_param_pin_memory,
       T::BOOL, true,
       "with offload_param cpu on a GPU: the parameter slices in page-locked host memory, so "
       "their gathers overlap compute (false: pageable, each copy blocks the host; DeepSpeed's "
       "default); nothing to pin on CPU"},
      {"placement.device_memory_limit", &TrainConfig::device_memory_limit, T::INT, 0,
       "bytes the compute tier (the device; on CPU a budgeted host allocator standing in for "
       "it) may hold: parameters, gradients, ZeRO buffers and, without offload, the optimizer "
       "state; exceeding it is an out-of-memory error; 0 = unlimited (under placement.policy=auto "
       "on a GPU: the free memory at the start less a margin of 5% of the GPU, at least 2 GiB)",
       ints(0)},
      {"placement.policy",
       {placement_policy_name, &TrainConfig::placement_policy},
       T::STRING,
       "device",
       "device (every chunk where its kind is allocated, never moved) or auto (PatrickStar: "
       "chunks move between the compute tier and the host on demand within "
       "placement.device_memory_limit, farthest next use evicted first; "
       "docs/zero.md#patrickstar-automatic-placement)"},
      {"placement.pin_memory", &TrainConfig::placement_pin_memory, T::BOOL, false,
       "with placement.policy=auto on a GPU: the host tier's chunks in page-locked memory, so "
       "their moves overlap compute and the next access's chunks are prefetched; the host then "
       "keeps memory for every chunk that has been there, up to every state (the largest "
       "model is bound by the host alone: docs/zero.md#patrickstar-automatic-placement). "
       "false: pageable, each move blocks the host; nothing to pin on CPU"},
      {"activation_checkpointing.policy",
       {parse_activation_policy, &TrainConfig::activation_policy},
       T::STRING,
       "none",
       "none (save all), selective (recompute attention core) or full (recompute blocks)"},
      {"activation_checkpointing.partition_activations", &TrainConfig::partition_activations,
       T::BOOL, false,
       "ZeRO-R P_a: each tensor-parallel rank keeps only its 1/t slice of every block input "
       "(needs policy full, tensor_parallel.size > 1, no sequence_parallel)"},
      {"activation_checkpointing.cpu_checkpointing", &TrainConfig::cpu_checkpointing, T::BOOL,
       false, "the partitioned block inputs go to host memory (needs partition_activations)"},
      {"activation_checkpointing.contiguous_memory_optimization",
       {},
       T::BOOL,
       false,
       "DeepSpeed: copy the partitioned activations into one buffer, a memory layout; ignored",
       {},
       kIgnored},
      {"activation_checkpointing.number_checkpoints",
       {},
       T::INT,
       nullptr,
       "DeepSpeed: checkpoints per step, sizing that buffer; ignored",
       ints(0),
       kIgnored},
      {"activation_checkpointing.synchronize_checkpoint_boundary",
       {},
       T::BOOL,
       false,
       "DeepSpeed: a device synchronize at each checkpoint; ignored",
       {},
       kIgnored},
      {"activation_checkpointing.profile",
       {},
       T::BOOL,
       false,
       "DeepSpeed: log each checkpointed block's forward and backward time; ignored (tide: "
       "trace.steps)",
       {},
       kIgnored},
      {"chunk_size_mb", &TrainConfig::chunk_size_mb, T::FLOAT, 0.0,
       "target chunk size (= communication bucket) in MiB of f32; the parameters one op reads "
       "stay in one chunk when they fit, a larger tensor gets a chunk of its own; 0 = the "
       "largest op's parameters (model/param_groups.h)",
       nums(0, false, 1048576)},
      {"world_size", &TrainConfig::world_size, T::INT, 0,
       "ranks in the job; 0 = as launched (tide train: the mpirun ranks; tide estimate: 1); "
       "tide train refuses a value other than the ranks it runs on",
       ints(0, 16777216)},
      {"tensor_parallel.size", &TrainConfig::tensor_parallel, T::INT, 1,
       "tensor-parallel degree t (Megatron-LM, docs/tensor-parallel.md): ranks = t x "
       "data-parallel replicas (x pipeline.stages); model.n_head must divide by t",
       ints(1, 65536)},
      {"tensor_parallel.sequence_parallel", &TrainConfig::sequence_parallel, T::BOOL, false,
       "sequence parallelism over the tensor-parallel ranks (needs tensor_parallel.size > 1 and "
       "seq_len divisible by it)"},
      {"pipeline.stages", &TrainConfig::pipeline_stages, T::INT, 1,
       "pipeline stages p (tide train: one stage per rank, ranks = p x data-parallel replicas "
       "with ZeRO 0-3, offload and auto placement inside the stages; model.n_layer must divide "
       "over p x "
       "pipeline.virtual_stages)",
       ints(1, 65536)},
      {"pipeline.schedule",
       {canonical_schedule_name, &TrainConfig::pipeline_schedule},
       T::STRING,
       "1f1b",
       "gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-1p, zb-2p, zb-auto or zb-v "
       "(docs/pipeline.md); used with pipeline.stages > 1 (tide train builds zb-auto from its "
       "measured first step)"},
      {"pipeline.virtual_stages", &TrainConfig::virtual_stages, T::INT, 1,
       "model chunks per pipeline stage: >= 2 with interleaved, 2 with zb-v (its default), 1 "
       "otherwise",
       ints(1, 65536)},
      {"pipeline.memory_limit", &TrainConfig::pipeline_memory_limit, T::FLOAT, 0.0,
       "zb-auto's activation memory limit per stage, in micro-batches' activations (M_B), as "
       "`tide schedule --memory-limit`; 0 = 1F1B's peak (p M_B)",
       nums(0, false, 1048576)},
      {"model.preset", &TrainConfig::model_preset, T::STRING, "",
       "gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, llama3.2-1b, llama3.2-3b, llama3.1-8b, "
       "qwen2.5-0.5b, qwen2.5-7b or mistral-7b; sets the shape and family (a model key given too "
       "must equal the preset's)"},
      {"model.family",
       {parse_model_family, &TrainConfig::model, &GPTConfig::family},
       T::STRING,
       "gpt2",
       "gpt2, or llama: RoPE, RMSNorm, SwiGLU, grouped-query attention (Llama 3, Qwen2 with "
       "model.qkv_bias, Mistral); data, tensor (n_kv_head dividing over tensor_parallel.size, "
       "or dividing it: each key/value head then replicated over size/n_kv_head ranks) and "
       "pipeline parallelism as GPT-2; model.dropout on the attention probabilities only"},
      {"model.n_kv_head",
       {&TrainConfig::model, &GPTConfig::n_kv_head},
       T::INT,
       0,
       "llama: key/value heads (grouped-query attention; divides n_head; with fewer than "
       "tensor_parallel.size, replicated over the ranks: docs/tensor-parallel.md); 0 = n_head",
       ints(0, 65536)},
      {"model.intermediate_size",
       {&TrainConfig::model, &GPTConfig::intermediate_size},
       T::INT,
       0,
       "llama: the SwiGLU MLP's hidden width; 0 = 4 n_embd",
       ints(0, 1048576)},
      {"model.rope_theta",
       {&TrainConfig::model, &GPTConfig::rope_theta},
       T::FLOAT,
       10000.0,
       "llama: RoPE's base",
       nums(0, true)},
      {"model.rope_scaling.type",
       {[](const std::string& s) {
          if (s == "none") return RopeScaling::none;
          if (s == "llama3") return RopeScaling::llama3;
          TIDE_FAIL("model.rope_scaling.type '{}' is not known; use none or llama3", s);
        },
        &TrainConfig::model, &GPTConfig::rope_scaling},
       T::STRING,
       "none",
       "llama: RoPE frequency scaling, none or llama3 (Llama 3.1/3.2's, with the four keys "
       "below)"},
      {"model.rope_scaling.factor",
       {&TrainConfig::model, &GPTConfig::rope_factor},
       T::FLOAT,
       8.0,
       "llama3 rope scaling: factor",
       nums(0, true)},
      {"model.rope_scaling.low_freq_factor",
       {&TrainConfig::model, &GPTConfig::rope_low_freq_factor},
       T::FLOAT,
       1.0,
       "llama3 rope scaling: low_freq_factor",
       nums(0, true)},
      {"model.rope_scaling.high_freq_factor",
       {&TrainConfig::model, &GPTConfig::rope_high_freq_factor},
       T::FLOAT,
       4.0,
       "llama3 rope scaling: high_freq_factor (above low_freq_factor)",
       nums(0, true)},
      {"model.rope_scaling.original_max_position_embeddings",
       {&TrainConfig::model, &GPTConfig::rope_original_max_position_embeddings},
       T::INT,
       8192,
       "llama3 rope scaling: original_max_position_embeddings",
       ints(1)},
      {"model.rms_norm_eps",
       {&TrainConfig::model, &GPTConfig::rms_norm_eps},
       T::FLOAT,
       1e-5,
       "llama: RMSNorm's epsilon",
       nums(0, true, 1)},
      {"model.tie_word_embeddings",
       {&TrainConfig::model, &GPTConfig::tie_word_embeddings},
       T::BOOL,
       true,
       "llama: the LM head is the token embedding (false: its own output.weight); GPT-2's is "
       "always tied"},
      {"model.qkv_bias",
       {&TrainConfig::model, &GPTConfig::qkv_bias},
       T::BOOL,
       false,
       "llama: the q, k and v projections have a bias (Qwen2)"},
      {"model.n_layer",
       {&TrainConfig::model, &GPTConfig::n_layer},
       T::INT,
       4,
       "transformer blocks",
       ints(1, 65536)},
      {"model.n_head",
       {&TrainConfig::model, &GPTConfig::n_head},
       T::INT,
       4,
       "attention heads",
       ints(1, 65536)},
      {"model.n_embd",
       {&TrainConfig::model, &GPTConfig::n_embd},
       T::INT,
       96,
       "hidden size (divisible by n_head)",
       ints(1, 1048576)},
      {"model.vocab_size",
       {&TrainConfig::model, &GPTConfig::vocab_size},
       T::INT,
       0,
       "vocabulary; 0 = the data's tokenizer",
       ints(0, 16777216)},
      {"model.max_seq_len",
       {&TrainConfig::model, &GPTConfig::max_seq_len},
       T::INT,
       0,
       "positions; 0 = seq_len",
       ints(0, 1048576)},
      {"model.dropout",
       {&TrainConfig::model, &GPTConfig::dropout},
       T::FLOAT,
       0.0,
       "dropout rate: GPT-2 on the embedding, the attention probabilities and the residual "
       "branches; the Llama family on the attention probabilities only (transformers' "
       "attention_dropout)",
       nums(0, false, 1, true)},
      {"data.dir", &TrainConfig::data_dir, T::PATH, "",
       "directory from `tide prepare` (train.bin, val.bin, tokenizer.json, meta.json); "
       "empty = the embedded default corpus"},
      {"data.train", &TrainConfig::train_data, T::PATH, "",
       "training shards (path or glob); default data.dir/train.bin"},
      {"data.val", &TrainConfig::val_data, T::PATH, "",
       "validation shards (path or glob); default data.dir/val.bin (no validation if that is "
       "missing)"},
      {"data.shuffle", &TrainConfig::shuffle, T::BOOL, true, "shuffle sequence order each epoch"},
      {"eval.interval", &TrainConfig::eval_interval, T::INT, 100,
       "steps between validation runs; 0 = only at the end", ints(0)},
      {"eval.sequences", &TrainConfig::eval_sequences, T::INT, 128,
       "size of the fixed validation set: the first N sequences of the validation data, the "
       "same whatever the ranks, micro-batch or accumulation",
       ints(1)},
      {"log.interval", &TrainConfig::log_interval, T::INT, 10, "steps between metrics lines",
       ints(1)},
      {"steps_per_print",
       {},
       T::INT,
       10,
       "DeepSpeed's name for log.interval: either sets both; giving both with different values "
       "is an error",
       ints(1)},
      {"log.progress", &TrainConfig::progress, T::BOOL, true,
       "a progress line rewritten in place every step when stdout is a terminal of one process "
       "(not under mpirun); false, or any other stdout (a file, a pipe, mpirun's ranks): one whole "
       "line every log.interval steps"},
      {"wall_clock_breakdown",
       {},
       T::BOOL,
       false,
       "DeepSpeed: forward/backward/step timers in its log; ignored (tide: trace.steps)",
       {},
       kIgnored},
      {"dump_state",
       {},
       T::BOOL,
       false,
       "DeepSpeed: print the engine's state at start; ignored",
       {},
       kIgnored},
      {"out_dir",
       {non_empty_out_dir, &TrainConfig::out_dir},
       T::STRING,
       "runs/default",
       "metrics.jsonl, config.json and checkpoints; tide will not start over an earlier run's "
       "files here (see out_dir_overwrite)"},
      {"out_dir_overwrite", &TrainConfig::out_dir_overwrite, T::BOOL, false,
       "true = a new run may replace the metrics.jsonl, config.json and checkpoints of an "
       "earlier run in out_dir; false = it refuses to start (checkpoint.resume continues a run "
       "in place)"},
      {"checkpoint.interval", &TrainConfig::checkpoint_interval, T::INT, 0,
       "steps between resumable checkpoints (out_dir/model_step<N>.ckpt); 0 = only the final one",
       ints(0)},
      {"checkpoint.resume", &TrainConfig::resume, T::PATH, "",
       "checkpoint to resume from (weights, optimizer state, step, data position); same seed "
       "and global batch required; out_dir/metrics.jsonl keeps its lines up to that step and "
       "goes on from there; \"auto\" = the newest complete checkpoint in out_dir, or a fresh "
       "start when there is none (for relaunch loops)"},
      {"checkpoint.new_lr_schedule", &TrainConfig::new_lr_schedule, T::BOOL, false,
       "with checkpoint.resume: true = continue with this config's learning-rate schedule where "
       "it differs from the checkpoint's (the lr jumps at the resumed step); false = such a "
       "resume is refused, naming the keys that differ"},
      {"init_from", &TrainConfig::init_from, T::PATH, "",
       "checkpoint (file or sharded directory) or Hugging Face model folder whose weights start "
       "the run at step 0; it sets model.family and the shape (every model.* key but dropout: "
       "one the config gives must agree); no optimizer state, step or data position is taken "
       "(checkpoint.resume, when set, wins); see docs/config.md"},
      {"comm.timeout_s", &TrainConfig::comm_timeout_s, T::FLOAT, 600.0,
       "seconds any rank waits in one collective or send/recv before the job is ended with the "
       "operation, step and missing ranks named (keep it above the longest checkpoint write); "
       "see docs/reliability.md",
       nums(0, /*lo_open=*/true)},
      {"tensorboard.enabled", &TrainConfig::tensorboard, T::BOOL, false,
       "write TensorBoard event files (rank 0): every metrics.jsonl value as a scalar, at its "
       "step; see docs/observability.md"},
      {"tensorboard.output_path", &TrainConfig::tensorboard_path, T::STRING, "",
       "directory of the event files (created); empty = out_dir/tensorboard"},
      {"tensorboard.job_name",
       {tensorboard_job_name, &TrainConfig::tensorboard_job},
       T::STRING,
       "",
       "subdirectory of tensorboard.output_path for this run (DeepSpeed's job_name); empty = "
       "none"},
      {"trace.steps", &TrainConfig::trace_steps, T::INT, 0,
       "record a Chrome trace (chrome://tracing, Perfetto) of this many steps, after one "
       "untraced warm-up step: block parts, communication, chunk moves, optimizer; 0 = off",
       ints(0)},
      {"trace.path", &TrainConfig::trace_path, T::STRING, "",
       "the trace file (rank 0 gathers every rank's events into it); empty = out_dir/trace.json"},
  };
  return keys;
}

namespace {

// Edits between two keys: insertions, deletions, substitutions and swaps of two neighbours
// ("trian" -> "train" is one edit: the commonest typo).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] =
          std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
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
  // Close means a slip of the keyboard in the key's last part (the part that is wrong when
  // the sections are right): 1 edit in up to 5 characters, 2 up to 8, at most 3. A longer
  // distance is another word ("profile" is not "policy"): no suggestion beats a wrong one.
  const size_t dot = path.rfind('.');
  const size_t last = dot == std::string::npos ? path.size() : path.size() - dot - 1;
  const size_t limit = std::clamp<size_t>(last / 3, 1, 3);
  return best_d <= limit ? best : "";
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

// The value of an integer written as a JSON number: 200000000, 2e8 or 200000000.0 (DeepSpeed's
// configs write bucket sizes as 5e8, which JSON reads as a float); none for 2.5, for a value
// outside int64 and for anything else.
std::optional<int64_t> integral(const json& v) {
  if (v.is_number_unsigned())
    return v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)
               ? std::optional<int64_t>(static_cast<int64_t>(v.get<uint64_t>()))
               : std::nullopt;
  if (v.is_number_integer()) return v.get<int64_t>();
  if (!v.is_number_float()) return std::nullopt;
  const double x = v.get<double>();
  // 2^63 is the first double beyond int64 (every double from 2^53 up is integral).
  if (!std::isfinite(x) || x != std::floor(x) || x < -9223372036854775808.0 ||
      x >= 9223372036854775808.0)
    return std::nullopt;
  return static_cast<int64_t>(x);
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
  // DeepSpeed writes null for "not set" (number_checkpoints): fine where the key changes nothing.
  if (k.use == KeyUse::IGNORED && v.is_null()) return true;
  switch (k.type) {
    case ConfigType::INT: {
      // Without an upper bound (kNoMax) an integer key takes any int64.
      const std::optional<int64_t> x = integral(v);
      if (!x) return false;
      return static_cast<double>(*x) >= r.lo && (r.hi >= kNoMax || static_cast<double>(*x) <= r.hi);
    }
    case ConfigType::UINT:
      if (v.is_number_unsigned()) return true;
      if (v.is_number_float())  // 1e3; a float is integral from 2^53 on, but no longer exact
        return integral(v).has_value() && v.get<double>() >= 0 && v.get<double>() < 0x1p53;
      return v.is_number_integer() && v.get<int64_t>() >= 0;
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
      if (k->use == KeyUse::REFUSED)
        problems.push_back(fmt::format("config key '{}' is {}; remove it", path, k->doc));
      else if (!valid_value(it.value(), *k))
        problems.push_back(invalid_value(path, *k, it.value()));
      else if ((k->type == ConfigType::INT || k->type == ConfigType::UINT) &&
               it.value().is_number_float())
        flat[path] = *integral(it.value());  // 2e8 -> 200000000: one spelling per value
      else
        flat[path] = it.value();
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
// hf_folder: a Hugging Face model folder is accepted too (init_from).
void check_checkpoint_path(const char* key, const std::string& path, bool hf_folder = false) {
  if (path.empty()) return;
  std::error_code ec;
  TIDE_CHECK(fs::exists(path, ec), "{}: cannot open checkpoint '{}' (no such file); check the path",
             key, path);
  TIDE_CHECK(!is_uncommitted_checkpoint(path), "{}: {}", key, uncommitted_checkpoint_message(path));
  TIDE_CHECK(!fs::is_directory(path, ec) || is_sharded_checkpoint(path) ||
                 (hf_folder && is_hf_model_folder(path)),
             "{}: '{}' is a directory but not a sharded checkpoint (it has no index.json){}; name "
             "a checkpoint such as {}/model.ckpt",
             key, path, hf_folder ? " nor a Hugging Face model folder (no config.json)" : "", path);
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

// DeepSpeed's batch rule (deepspeed/runtime/config.py, _set_batch_related_parameters and
// _batch_assertion): train_batch_size = micro-batch x accumulation x data-parallel ranks. Of the
// three, the ones left out are derived from the ones given, with DeepSpeed's integer divisions;
// then the three must agree. With neither train_batch_size nor the micro-batch given (DeepSpeed
// refuses that), tide's default micro-batch applies. `dp`: the data-parallel ranks; 0 = not
// known (then nothing is derived, and all three given are not compared: the Trainer does it).
void resolve_batch(TrainConfig& c, bool micro_given, bool accum_given, int64_t dp) {
  const int64_t tb = c.train_batch_size;
  if (tb == 0 || dp == 0) return;  // nothing to derive, or the ranks are not known here
  int64_t micro = c.micro_batch, accum = c.grad_accum;
  if (!micro_given || !accum_given) {
    const char* derived =
        micro_given ? "gradient_accumulation_steps" : "train_micro_batch_size_per_gpu";
    std::string unit_text;  // what train_batch_size must be a multiple of
    int64_t unit = dp;
    if (micro_given) {
      accum = tb / micro / dp;
      unit = micro * dp;
      unit_text = fmt::format("train_micro_batch_size_per_gpu {} x ", micro);
    } else if (accum_given) {
      micro = tb / dp / accum;
      unit = accum * dp;
      unit_text = fmt::format("gradient_accumulation_steps {} x ", accum);
    } else {
      accum = 1;
      micro = tb / dp;
    }
    unit_text += fmt::format("{} data-parallel rank{}", dp, dp == 1 ? "" : "s");
    TIDE_CHECK(micro >= 1 && accum >= 1 && micro * accum * dp == tb,
               "train_batch_size={} is not a multiple of {} = {}, so {} cannot be derived "
               "(DeepSpeed's rule: train_batch_size = train_micro_batch_size_per_gpu x "
               "gradient_accumulation_steps x data-parallel ranks); make train_batch_size a "
               "multiple of {}, or give {}",
               tb, unit_text, unit, derived, unit, derived);
    TIDE_CHECK(micro <= 65536 && accum <= 65536,
               "train_batch_size={} over {} data-parallel rank{} gives {}={}, above its limit of "
               "65536; give train_micro_batch_size_per_gpu and gradient_accumulation_steps",
               tb, dp, dp == 1 ? "" : "s", derived, micro_given ? accum : micro);
    c.micro_batch = static_cast<int>(micro);
    c.grad_accum = static_cast<int>(accum);
  }
  TIDE_CHECK(micro * accum * dp == tb,
             "train_batch_size {} != train_micro_batch_size_per_gpu {} x "
             "gradient_accumulation_steps {} x data-parallel ranks {}; fix one of them, or leave "
             "one of the last two out to have it derived (DeepSpeed's rule)",
             tb, micro, accum, dp);
}

// init_from sets the model as from_pretrained does: every shape key the config leaves out is
// the source's; one it gives (itself or through model.preset) must say the same, else one error
// names each such key with both values. model.dropout stays the config's (a training setting).
// Read for tide estimate too (check_paths false): its sizes need the source's shape.
void resolve_init_from_model(TrainConfig& c, const std::function<bool(const char*)>& is_given) {
  check_checkpoint_path("init_from", c.init_from, /*hf_folder=*/true);
  GPTConfig source;
  try {
    source = init_from_model(c.init_from);
  } catch (const Error& e) {
    TIDE_FAIL("init_from: {}", e.what());
  }
  std::string conflicts;
  const bool preset = !c.model_preset.empty();
  for (const ModelKeyDifference& d : model_key_differences(c.model, source)) {
    if (!preset && !is_given(d.key)) continue;
    // 0 = "derive it" (from the data, seq_len, n_head, n_embd): here, from the source.
    const std::string_view k = d.key;
    if (d.a == "0" && (k == "model.vocab_size" || k == "model.max_seq_len" ||
                       k == "model.n_kv_head" || k == "model.intermediate_size"))
      continue;
    conflicts += fmt::format("{}{}={}{} (init_from's: {})", conflicts.empty() ? "" : ", ", d.key,
                             d.a, preset && !is_given(d.key) ? " from model.preset" : "", d.b);
  }
  TIDE_CHECK(conflicts.empty(),
             "init_from='{}' holds a model {} but the config gives {}; init_from sets the "
             "model's shape: remove {} from the config, or init_from a model of this shape",
             c.init_from, source.str(), conflicts,
             preset ? "model.preset and these keys" : "these model.* keys");
  // (check_settings' message would say to raise model.max_seq_len, which is the source's.)
  TIDE_CHECK(c.seq_len <= source.max_seq_len,
             "seq_len {} exceeds the {} positions of init_from's model ('{}'); set seq_len to at "
             "most {}",
             c.seq_len, source.max_seq_len, c.init_from, source.max_seq_len);
  source.dropout = c.model.dropout;
  c.model = source;
}

TrainConfig parse_checked(const json& j, std::vector<std::string> unknown, bool check_paths,
                          int ranks) {
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
  std::vector<std::string> ignored;
  for (const ConfigKey& k : config_schema())
    if (k.use == KeyUse::IGNORED && is_given(k.path)) ignored.push_back(k.path);
  // One spelling per value (2 and 2.0 are the same rate), so that config.json and the ranks'
  // agreement hashes see values, not spellings.
  for (const ConfigKey& k : config_schema()) {
    if (k.type == ConfigType::FLOAT && !v[k.path].is_null())  // null: an ignored key unset
      v[k.path] = v[k.path].get<double>();
    if (k.type == ConfigType::FLOAT_PAIR)
      v[k.path] = json::array({v[k.path][0].get<double>(), v[k.path][1].get<double>()});
  }
  // Every value now has its type and lies in its key's range: the narrowing below is exact.
  auto i = [&](const char* p) { return v.at(p).get<int64_t>(); };
  auto s = [&](const char* p) { return v.at(p).get<std::string>(); };
  auto b = [&](const char* p) { return v.at(p).get<bool>(); };

  // DeepSpeed's deprecated booleans, read as its pydantic model reads them: true sets the new
  // key's device to "cpu", and giving the new key as well is an error. Recorded in the new key
  // (and the old one false), so that config.json holds one spelling; before the fields are set,
  // which read the new key.
  for (const auto& [old_key, new_key] :
       {std::pair{"zero_optimization.cpu_offload", "zero_optimization.offload_optimizer.device"},
        std::pair{"zero_optimization.cpu_offload_params",
                  "zero_optimization.offload_param.device"}}) {
    if (!b(old_key)) continue;
    TIDE_CHECK(!is_given(new_key),
               "{} (deprecated in DeepSpeed) and {} are the same setting; give only {}", old_key,
               new_key, new_key);
    v[new_key] = "cpu";
    v[old_key] = false;
  }

  TrainConfig c;
  c.ignored_keys = ignored;
  // Every key with a field, in table order (a parser there refuses a bad name).
  for (const ConfigKey& k : config_schema())
    if (k.field) k.field.apply(c, v.at(k.path));

  // What the table cannot say: keys read together, values resolved from other keys, one
  // spelling per value in c.values. The rules between keys are check_settings' (last).
  // DeepSpeed lower-cases the names of its own optimizers (adam, adamw, ...) and takes any other
  // name from torch.optim (SGD). Adam is AdamW unless adam_w_mode is false (its engine's
  // effective_adam_w_mode). SGD is a name tide estimate sizes (no optimizer state); tide train
  // refuses it (unsupported_settings.h).
  std::string opt = s("optimizer.type");
  std::transform(opt.begin(), opt.end(), opt.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  TIDE_CHECK(opt == "adam" || opt == "adamw" || opt == "sgd",
             "optimizer.type '{}' is not supported; tide has Adam and AdamW (DeepSpeed's "
             "spellings, any case; Adam with optimizer.params.adam_w_mode=false is classic Adam "
             "with L2), and SGD for tide estimate only",
             s("optimizer.type"));
  c.optimizer_type = opt == "sgd" ? "SGD" : "AdamW";
  c.adam_w_mode = opt != "adam" || b("optimizer.params.adam_w_mode");
  v["optimizer.type"] = opt == "adam" ? "Adam" : c.optimizer_type;
  v["optimizer.params.adam_w_mode"] = c.adam_w_mode;
  // The schedule, as DeepSpeed reads its scheduler section (optim/lr_schedule.h).
  LrSchedule& ls = c.lr_schedule;
  ls.lr = c.lr;
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
  if (ls.total_num_steps == 0) ls.total_num_steps = c.train_steps;
  v["scheduler.params.total_num_steps"] = ls.total_num_steps;
  TIDE_CHECK(ls.warmup_num_steps != 0,
             "scheduler.params.warmup_num_steps must be a positive integer (as in DeepSpeed), or "
             "-1 for 10% of total_num_steps");
  if (ls.warmup_num_steps == -1) {
    ls.warmup_num_steps = std::max<int64_t>(1, ls.total_num_steps / 10);
    v["scheduler.params.warmup_num_steps"] = ls.warmup_num_steps;
  }
  v["activation_checkpointing.policy"] = activation_policy_name(c.activation_policy);
  v["pipeline.schedule"] = c.pipeline_schedule;
  // zb-v always runs two chunks per stage: the key may say so, or be left at 1.
  if (c.pipeline_schedule == "zb-v" && c.pipeline_stages > 1 &&
      !is_given("pipeline.virtual_stages"))
    c.virtual_stages = 2;
  v["pipeline.virtual_stages"] = c.virtual_stages;

  if (!c.model_preset.empty()) {
    GPTConfig preset = GPTConfig::preset(c.model_preset);
    // A shape key next to a preset would be dropped: an error unless it says the same.
    const std::pair<const char*, int> shape[] = {{"model.n_layer", preset.n_layer},
                                                 {"model.n_head", preset.n_head},
                                                 {"model.n_embd", preset.n_embd},
                                                 {"model.vocab_size", preset.vocab_size},
                                                 {"model.max_seq_len", preset.max_seq_len}};
    for (const auto& [key, preset_value] : shape)
      TIDE_CHECK(!is_given(key) || i(key) == preset_value,
                 "{}={} conflicts with model.preset={}, whose {} is {}; remove {}, or remove "
                 "model.preset and give every shape key",
                 key, i(key), c.model_preset, key, preset_value, key);
    // The family's keys likewise (they are the preset's: c.model has read them already).
    const GPTConfig& m = c.model;
    const std::pair<const char*, bool> same[] = {
        {"model.family", m.family == preset.family},
        {"model.n_kv_head", m.n_kv_head == preset.n_kv_head},
        {"model.intermediate_size", m.intermediate_size == preset.intermediate_size},
        {"model.rope_theta", m.rope_theta == preset.rope_theta},
        {"model.rope_scaling.type", m.rope_scaling == preset.rope_scaling},
        {"model.rope_scaling.factor", m.rope_factor == preset.rope_factor},
        {"model.rope_scaling.low_freq_factor",
         m.rope_low_freq_factor == preset.rope_low_freq_factor},
        {"model.rope_scaling.high_freq_factor",
         m.rope_high_freq_factor == preset.rope_high_freq_factor},
        {"model.rope_scaling.original_max_position_embeddings",
         m.rope_original_max_position_embeddings == preset.rope_original_max_position_embeddings},
        {"model.rms_norm_eps", m.rms_norm_eps == preset.rms_norm_eps},
        {"model.tie_word_embeddings", m.tie_word_embeddings == preset.tie_word_embeddings},
        {"model.qkv_bias", m.qkv_bias == preset.qkv_bias}};
    for (const auto& [key, equal] : same)
      TIDE_CHECK(!is_given(key) || equal,
                 "{}={} conflicts with model.preset={}, which sets its own; remove {}, or remove "
                 "model.preset and give every model key",
                 key, v.at(key).dump(), c.model_preset, key);
    preset.dropout = c.model.dropout;  // not part of the shape
    c.model = preset;
  } else if (c.model.max_seq_len == 0 && c.init_from.empty()) {
    c.model.max_seq_len = c.seq_len;
  }
  if (!c.init_from.empty()) resolve_init_from_model(c, is_given);
  // The shape the run uses (a preset's or init_from's, max_seq_len 0 -> seq_len).
  v["model.n_layer"] = c.model.n_layer;
  v["model.n_head"] = c.model.n_head;
  v["model.n_embd"] = c.model.n_embd;
  v["model.vocab_size"] = c.model.vocab_size;
  v["model.max_seq_len"] = c.model.max_seq_len;
  if (!c.model_preset.empty() || !c.init_from.empty()) {  // the family's keys they set
    const GPTConfig& m = c.model;
    v["model.family"] = model_family_name(m.family);
    v["model.n_kv_head"] = m.n_kv_head;
    v["model.intermediate_size"] = m.intermediate_size;
    v["model.rope_theta"] = m.rope_theta;
    v["model.rope_scaling.type"] = m.rope_scaling == RopeScaling::llama3 ? "llama3" : "none";
    v["model.rope_scaling.factor"] = m.rope_factor;
    v["model.rope_scaling.low_freq_factor"] = m.rope_low_freq_factor;
    v["model.rope_scaling.high_freq_factor"] = m.rope_high_freq_factor;
    v["model.rope_scaling.original_max_position_embeddings"] =
        m.rope_original_max_position_embeddings;
    v["model.rms_norm_eps"] = m.rms_norm_eps;
    v["model.tie_word_embeddings"] = m.tie_word_embeddings;
    v["model.qkv_bias"] = m.qkv_bias;
  }

  if (is_given("steps_per_print")) {
    TIDE_CHECK(!is_given("log.interval") || i("log.interval") == i("steps_per_print"),
               "steps_per_print ({}) and log.interval ({}) are the same setting with different "
               "values; give one of them",
               i("steps_per_print"), i("log.interval"));
    c.log_interval = i("steps_per_print");
  }
  v["log.interval"] = v["steps_per_print"] = c.log_interval;
  c.is_default_run = c.data_dir.empty() && c.train_data.empty();
  // The batch, now that the layout is known: data-parallel ranks = ranks / (tp x pp) (what
  // DeepSpeed's world_size is under Megatron's mpu). A layout that does not divide the ranks is
  // refused by the Trainer and by tide estimate, with its own message.
  const int64_t world = ranks > 0 ? ranks : c.world_size;
  const int64_t replica = int64_t{c.tensor_parallel} * c.pipeline_stages;
  const bool world_known = world > 0;
  int64_t dp = world_known ? std::max<int64_t>(1, world / replica) : 1;
  // All three given and the ranks not known: the Trainer compares them against its ranks.
  if (!world_known && is_given("train_micro_batch_size_per_gpu") &&
      is_given("gradient_accumulation_steps"))
    dp = 0;
  resolve_batch(c, is_given("train_micro_batch_size_per_gpu"),
                is_given("gradient_accumulation_steps"), dp);
  v["train_micro_batch_size_per_gpu"] = c.micro_batch;
  v["gradient_accumulation_steps"] = c.grad_accum;
  check_settings(c);  // the rules between keys, on the resolved values
  c.values = json(v);

  if (!check_paths) return c;
  check_path("data.dir", c.data_dir, /*directory=*/true);
  check_path("data.train", c.train_data, false);
  check_path("data.val", c.val_data, false);
  if (c.resume != "auto") check_checkpoint_path("checkpoint.resume", c.resume);
  return c;
}

}  // namespace

TrainConfig parse_train_config(const json& j, bool check_paths, int ranks) {
  return parse_checked(j, {}, check_paths, ranks);
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              bool check_paths, int ranks) {
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
  return parse_checked(j, unknown, check_paths, ranks);
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
  for (const auto& [key, value] : c.values.items()) {
    // A key that cannot change the run is recorded only when the config gave it; a refused
    // key never is (reading it back would be refused).
    const ConfigKey* k = find_key(key);
    if (k && k->use == KeyUse::REFUSED) continue;
    if (k && k->use == KeyUse::IGNORED &&
        std::find(c.ignored_keys.begin(), c.ignored_keys.end(), key) == c.ignored_keys.end())
      continue;
    set_path(j, key, value);
  }
  return j;
}

std::string ignored_keys_warning(const TrainConfig& c) {
  if (c.ignored_keys.empty()) return "";
  std::string list;
  for (const std::string& k : c.ignored_keys) list += (list.empty() ? "" : ", ") + k;
  return fmt::format(
      "tide: warning: ignoring {} DeepSpeed config key{} that cannot change a tide run: {} "
      "(docs/config.md, \"Coming from DeepSpeed\")",
      c.ignored_keys.size(), c.ignored_keys.size() == 1 ? "" : "s", list);
}

void set_resolved_value(TrainConfig& c, const std::string& key, const json& value) {
  TIDE_CHECK(find_key(key) != nullptr, "set_resolved_value: '{}' is not a config key", key);
  c.values[key] = value;
}

const json& default_config() {
  // Close to nanoGPT's schedule: a linear warmup over 10% of the steps (15 of the default
  // 150), then a cosine to 10% of lr. The peak lr is higher than DeepSpeed's (Adam's) 1e-3,
  // which a config file without one keeps: the default model is small, and the first command
  // has a minute to train it (L2 C128, 200 steps: validation loss 5.80 at 3e-3 against 6.02 at
  // 1e-3).
  static const json config = json::parse(R"({
    "optimizer": {"params": {"lr": 3e-3}},
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

DType model_dtype(const TrainConfig& c) {
  return c.bf16 ? DType::BF16 : c.fp16 ? DType::F16 : DType::F32;
}

bool on_device(const TrainConfig& c) {
  return c.device != "cpu" && c.device != "auto";
}

namespace {

std::optional<DType> given_dtype(const std::string& key_value) {
  if (key_value.empty()) return std::nullopt;  // left out (or ""): DeepSpeed's default
  return parse_dtype(key_value);
}

}  // namespace

std::optional<DType> given_grad_dtype(const TrainConfig& c) {
  return given_dtype(c.grad_accum_dtype);
}

std::optional<DType> given_comm_dtype(const TrainConfig& c) {
  return given_dtype(c.communication_data_type);
}

DType comm_dtype(const TrainConfig& c) {
  return given_comm_dtype(c).value_or(default_comm_dtype(model_dtype(c)));
}

ZeroSettings zero_settings(const TrainConfig& c) {
  ZeroSettings z = c.zero;
  z.comm_dtype = comm_dtype(c);
  return z;
}

DType grad_dtype(const TrainConfig& c) {
  return given_grad_dtype(c).value_or(default_grad_dtype(model_dtype(c), c.zero.stage));
}

}  // namespace tide
