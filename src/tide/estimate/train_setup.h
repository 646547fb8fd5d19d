#pragma once
// One training configuration as the memory model sees it: the model shape, how the world is
// cut into data/tensor/pipeline parallel groups, what ZeRO partitions, where offload puts the
// model states, what activations are kept, and which pipeline schedule runs.
//
// Symbols used throughout estimate/ (the papers' own letters):
//   Psi  parameters held by one pipeline stage (before TP sharding, ZeRO's Psi)
//   Nd   data-parallel degree = world_size / (tp * pp)
//   t    tensor-parallel degree,  p  pipeline stages,  m  micro-batches per step
//   s    sequence length,  b  micro-batch size,  h  hidden size,  a  attention heads,
//   v    vocabulary size,  L  layers

#include <cstdint>
#include <optional>
#include <string>

#include "tide/core/dtype.h"
#include "tide/memory/zero_settings.h"
#include "tide/model/config.h"

namespace tide {

// Precision of the forward/backward math. bf16 and fp16 are mixed precision: 16-bit params,
// grads and activations, with fp32 master weights kept by the optimizer.
enum class Precision { FP32, BF16, FP16 };
enum class Optimizer { AdamW, SGD };  // SGD: plain, no state
// Where the model states live (design: placement policies over chunks).
//   None:      everything on the device.
//   Optimizer: ZeRO-Offload. fp32 master, Adam m/v and this rank's gradient partition on the
//              host, Adam runs on the CPU.
//   All:       also the rank's param16 partition on the host, fetched per use (ZeRO-3 only).
enum class Offload { None, Optimizer, All };
// Activation policy (Korthikanti et al.): keep all, recompute the attention core, or keep
// only each block's input and recompute the whole block in backward.
enum class Recompute { None, Selective, Full };
// The schedules tide train runs (pipeline/generators.h). ZBAuto, ZB1P and ZB2P are built by
// the zero-bubble heuristic under a memory limit (ZBAuto from measured times: sized as a bound);
// ZBV runs two model chunks per stage in a V.
enum class Schedule { OneFOneB, GPipe, Interleaved, ZBH1, ZBH2, ZBAuto, ZB1P, ZB2P, ZBV };
// placement.policy: Device keeps every chunk where its kind is allocated; Auto is PatrickStar's
// automatic placement (parallel/auto_placement.h): chunks move between the device and the host on
// demand within placement.device_memory_limit (see estimate/limit_fit.h for how it is sized).
enum class Placement { Device, Auto };

// Not checked here: `tide estimate` derives a setup from a TrainConfig that the config's own
// rules have checked (config/estimate_setup.h, config/check_settings.h), one set of rules for
// both commands; code that builds a setup by hand (tests, --max-model's shapes) keeps it legal.
struct TrainSetup {
  GPTConfig model;      // model.max_seq_len: positions (rows of wpe)
  int seq_len = 0;      // s: tokens per training sequence; 0 = model.max_seq_len
  int world_size = 1;   // ranks (GPUs) in the job
  int tp = 1;           // tensor-parallel degree t
  int pp = 1;           // pipeline stages p
  bool sp = false;      // sequence parallelism (needs tp > 1 to matter)
  int micro_batch = 1;  // b: sequences per micro-batch per data-parallel rank
  int grad_accum = 1;   // m: micro-batches per optimizer step (the pipeline's micro-batches)
  int zero_stage = 0;   // 0 = plain DDP, 1/2/3 = ZeRO-DP stages
  // zero_optimization.* bucket sizes and thresholds (they set how many communication buffers
  // the runtime holds, see zero_buffers.h); zero.stage and zero.comm_dtype are not read:
  // zero_stage is the stage, comm_precision_of the reductions' dtype.
  ZeroSettings zero;
  Offload offload = Offload::None;
  Recompute recompute = Recompute::None;
  // ZeRO-R P_a (activation_checkpointing.partition_activations; sized under full recompute with
  // tp > 1 and no sp, as tide train requires) and its CPU checkpointing.
  bool partition_activations = false, cpu_checkpointing = false;
  Precision precision = Precision::BF16;
  // data_types.grad_accum_dtype and communication_data_type, only where the config gives them.
  // Left out, DeepSpeed's defaults depend on the stage (f32 gradients for bf16 at stage 0), so
  // each row of `tide estimate` takes those of its own stage, as `tide train` would at that
  // stage: read them through grad_precision_of and comm_precision_of, not here.
  std::optional<Precision> grad_precision, comm_precision;
  Optimizer optimizer = Optimizer::AdamW;
  Schedule schedule = Schedule::OneFOneB;
  int virtual_stages = 1;  // model chunks per pipeline stage (interleaved; 2 with zb-v)
  // zb-auto's activation limit per stage in micro-batches (pipeline.memory_limit); 0 = p.
  double memory_limit = 0;
  // Target chunk size in MiB of f32 elements (tide train's chunk_size_mb, same unit);
  // 0 = the largest tensor of the stage.
  double chunk_mib = 0;
  int gpus_per_host = 0;  // ranks sharing one host's memory; 0 = min(world_size, 8)
  // placement.policy and placement.device_memory_limit (bytes one GPU's compute tier may hold;
  // 0 = no limit). Auto needs a limit and no offload (as tide train requires).
  Placement placement = Placement::Device;
  int64_t device_memory_limit = 0;
  // device: false on the CPU (cpu, auto), true on a device (cuda, sim), where the per-tensor
  // gradient sums keep a buffer of their own in device memory (exec/policy_stack.cpp).
  bool on_device = false;
  // placement.pin_memory with auto on a device: the host keeps memory for every chunk that
  // has been there, counted as every state (AutoPlacement's cache of page-locked blocks).
  bool pinned_host_tier = false;

  int dp() const { return world_size / (tp * pp); }
  int seq() const { return seq_len > 0 ? seq_len : model.max_seq_len; }
  int64_t chunk_target_elems() const;  // chunk_mib in elements (0: automatic)
  int ranks_per_host() const;
  std::string str() const;  // one line for the report header
};

// The gradients' and the reductions' precision of `setup` run at ZeRO stage `zero_stage`: the
// key's value where the config gives it, else DeepSpeed's default for that stage
// (default_grad_dtype, default_comm_dtype: memory/zero_settings.h, as tide train resolves them).
Precision grad_precision_of(const TrainSetup& setup, int zero_stage);
Precision comm_precision_of(const TrainSetup& setup, int zero_stage);

int bytes_per_param(Precision p);  // compute-precision element: 2 (bf16/fp16) or 4 (fp32)
DType dtype_of(Precision p);       // the storage dtype: F32, BF16 or F16
Precision precision_of(DType t);   // F32, BF16 or F16 (any other dtype: an error)

std::string to_string(Precision p);
std::string to_string(Offload o);
std::string to_string(Recompute r);
std::string to_string(Schedule s);
std::string to_string(Optimizer o);
std::string to_string(Placement p);
// The enums of the config's names (config/estimate_setup.cpp; the config has checked them):
// parsers accept the names to_string gives (plus DeepSpeed/Megatron spellings, see .cpp) and
// throw a tide::Error listing the accepted names otherwise.
Schedule parse_schedule(const std::string& s);
Optimizer parse_optimizer(const std::string& s);
Placement parse_placement(const std::string& s);

}  // namespace tide
