#include "tide/estimate/train_setup.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tide/core/error.h"
#include "tide/memory/chunk_layout.h"
#include "tide/model/layout.h"

namespace tide {

int TrainSetup::ranks_per_host() const {
  // 8 GPUs per node is the common server (DGX); the flag --gpus-per-host overrides it.
  return gpus_per_host > 0 ? std::min(gpus_per_host, world_size) : std::min(world_size, 8);
}

void TrainSetup::validate() const {
  model.validate();
  TIDE_CHECK(world_size >= 1, "world size must be at least 1 (got {})", world_size);
  TIDE_CHECK(tp >= 1, "tensor_parallel.size must be at least 1 (got {})", tp);
  TIDE_CHECK(pp >= 1, "pipeline.stages must be at least 1 (got {})", pp);
  TIDE_CHECK(world_size % (tp * pp) == 0,
             "world size {} is not divisible by tp*pp = {}*{} = {}; the data-parallel degree is "
             "world_size/(tp*pp), so pick a world size that is a multiple of {}",
             world_size, tp, pp, tp * pp, tp * pp);
  // Hidden first: n_embd = n_head * head_size, so a tp that fails here fails for heads too
  // and this message is the more direct one.
  TIDE_CHECK(
      model.n_embd % tp == 0,
      "model.n_embd ({}) is not divisible by tensor_parallel.size ({}): the hidden size is split "
      "evenly across tp ranks; choose a tp that divides {}",
      model.n_embd, tp, model.n_embd);
  TIDE_CHECK(
      model.n_head % tp == 0,
      "model.n_head ({}) is not divisible by tensor_parallel.size ({}): tensor parallelism gives "
      "each rank n_head/tp whole heads; choose a tp that divides {}",
      model.n_head, tp, model.n_head);
  check_tensor_parallel_shape(model, tp);  // the Llama family: key/value heads, MLP width
  TIDE_CHECK(
      model.n_layer % pp == 0,
      "model.n_layer ({}) is not divisible by pipeline.stages ({}): every pipeline stage holds "
      "n_layer/pp layers; choose a pp that divides {}",
      model.n_layer, pp, model.n_layer);
  TIDE_CHECK(seq_len >= 0, "seq_len must be positive, or 0 for model.max_seq_len (got {})",
             seq_len);
  TIDE_CHECK(seq() <= model.max_seq_len,
             "seq_len {} exceeds model.max_seq_len {}; lower seq_len or raise model.max_seq_len",
             seq(), model.max_seq_len);
  TIDE_CHECK(!sp || seq() % tp == 0,
             "sequence length {} is not divisible by tensor_parallel.size ({}) under sequence "
             "parallelism, "
             "which splits the sequence across tp ranks; use a multiple of {} or turn "
             "tensor_parallel.sequence_parallel off",
             seq(), tp, tp);
  TIDE_CHECK(micro_batch >= 1, "train_micro_batch_size_per_gpu must be at least 1 (got {})",
             micro_batch);
  TIDE_CHECK(grad_accum >= 1, "gradient_accumulation_steps must be at least 1 (got {})",
             grad_accum);
  TIDE_CHECK(zero_stage >= 0 && zero_stage <= 3,
             "zero_optimization.stage must be 0, 1, 2 or 3 (got {})", zero_stage);
  // The rules below that a config states too are check_settings' (config/check_settings.cpp)
  // when the setup comes from one; here they guard the flags, which may override the config.
  TIDE_CHECK(offload == Offload::None || zero_stage >= 1,
             "offload_optimizer needs ZeRO (the host keeps this rank's optimizer partition); set "
             "zero_optimization.stage to 1, 2 or 3, or turn offload off");
  TIDE_CHECK(offload != Offload::All || zero_stage == 3,
             "offload_param needs zero_optimization.stage 3 (only stage 3 partitions the "
             "parameters); set stage 3 or set offload_param.device to \"none\"");
  TIDE_CHECK(chunk_mib >= 0, "chunk_size_mb must be >= 0, 0 being automatic (got {})", chunk_mib);
  TIDE_CHECK(std::isfinite(memory_limit) && (memory_limit == 0 || memory_limit >= 1),
             "pipeline.memory_limit must be 0 (1F1B's peak, p micro-batches) or at least 1 "
             "micro-batch's activations (got {})",
             memory_limit);
  TIDE_CHECK(gpus_per_host >= 0, "gpus per host must be positive (got {})", gpus_per_host);
  TIDE_CHECK(device_memory_limit >= 0,
             "placement.device_memory_limit must be >= 0 bytes, 0 being no limit (got {})",
             device_memory_limit);
  if (placement == Placement::Auto) {  // what tide train refuses (config/check_settings.cpp)
    TIDE_CHECK(device_memory_limit > 0,
               "placement.policy=auto needs placement.device_memory_limit > 0 (the budget auto "
               "fills and evicts from); give it (--device-memory-limit 40GiB), or use "
               "placement.policy=device");
    TIDE_CHECK(offload == Offload::None,
               "placement.policy=auto places the optimizer state and the parameters itself, so "
               "it cannot be combined with offload ({}); set the offload devices to \"none\", or "
               "use placement.policy=device",
               to_string(offload));
    TIDE_CHECK(tp == 1,
               "placement.policy=auto runs with tensor_parallel.size 1 (got {}); set it to 1, or "
               "use placement.policy=device",
               tp);
    // As tide train (config/check_settings.cpp): one store per stage, a fixed schedule.
    TIDE_CHECK(pp == 1 || (schedule != Schedule::Interleaved && schedule != Schedule::ZBV &&
                           schedule != Schedule::ZBAuto),
               "placement.policy=auto with pipeline.stages {} runs one model chunk per stage and "
               "a fixed schedule (not interleaved, zb-v or zb-auto); pick another schedule, or "
               "use placement.policy=device",
               pp);
  }
  if (schedule == Schedule::Interleaved && pp > 1) {
    TIDE_CHECK(virtual_stages >= 2,
               "the interleaved schedule needs pipeline.virtual_stages >= 2 (got {}); with one "
               "model chunk per stage use the 1f1b schedule",
               virtual_stages);
    TIDE_CHECK(model.n_layer % (pp * virtual_stages) == 0,
               "model.n_layer ({}) is not divisible by pp*virtual_stages = {}*{}: each model "
               "chunk holds n_layer/(pp*virtual_stages) layers; change one of them",
               model.n_layer, pp, virtual_stages);
    TIDE_CHECK(grad_accum % pp == 0,
               "the interleaved schedule needs gradient_accumulation_steps ({}) to be a multiple "
               "of pipeline.stages ({}) (as in Megatron-LM); change either",
               grad_accum, pp);
  } else if (schedule == Schedule::ZBV && pp > 1) {
    TIDE_CHECK(virtual_stages == 2,
               "the zb-v schedule runs two model chunks per stage, so pipeline.virtual_stages "
               "must be 2 (got {}); remove the key or set it to 2",
               virtual_stages);
    TIDE_CHECK(model.n_layer % (2 * pp) == 0,
               "model.n_layer ({}) is not divisible by 2*pipeline.stages = {}: zb-v's model "
               "chunks hold n_layer/(2*stages) layers each; change one of them",
               model.n_layer, 2 * pp);
  } else {
    TIDE_CHECK(virtual_stages == 1,
               "pipeline.virtual_stages ({}) only applies to the interleaved schedule with pp > 1; "
               "remove it or set pipeline.schedule to \"interleaved\"",
               virtual_stages);
  }
}

int64_t TrainSetup::chunk_target_elems() const {
  return chunk_elems_from_mib(chunk_mib);
}

std::string TrainSetup::str() const {
  std::string s = fmt::format(
      "{} | world {} = dp {} x tp {}{} x pp {} | micro-batch {} x {} micro-batches, seq {} | {} "
      "{}",
      model.str(), world_size, dp(), tp, sp ? " (+sp)" : "", pp, micro_batch, grad_accum, seq(),
      to_string(precision), to_string(optimizer));
  if (pp > 1) s += fmt::format(" | schedule {}", to_string(schedule));
  if (schedule == Schedule::Interleaved && pp > 1) s += fmt::format(" (v={})", virtual_stages);
  if (schedule == Schedule::ZBAuto && pp > 1 && memory_limit > 0)
    s += fmt::format(" (memory limit {} M_B)", memory_limit);
  if (placement == Placement::Auto) s += " | placement auto";
  return s;
}

Precision grad_precision_of(const TrainSetup& setup, int zero_stage) {
  if (setup.grad_precision) return *setup.grad_precision;
  return precision_of(default_grad_dtype(dtype_of(setup.precision), zero_stage));
}

// The stage is not read: DeepSpeed's default for communication_data_type is the same at every
// stage (only the gradients' default changes, and with it whether the reductions stage).
Precision comm_precision_of(const TrainSetup& setup, int /*zero_stage*/) {
  if (setup.comm_precision) return *setup.comm_precision;
  return precision_of(default_comm_dtype(dtype_of(setup.precision)));
}

int bytes_per_param(Precision p) {
  return p == Precision::FP32 ? 4 : 2;
}

DType dtype_of(Precision p) {
  return p == Precision::FP32 ? DType::F32 : p == Precision::BF16 ? DType::BF16 : DType::F16;
}

Precision precision_of(DType t) {
  switch (t) {
    case DType::F32:
      return Precision::FP32;
    case DType::BF16:
      return Precision::BF16;
    case DType::F16:
      return Precision::FP16;
    default:
      break;
  }
  TIDE_FAIL("no training precision has dtype {}; use f32, bf16 or f16", dtype_name(t));
}

std::string to_string(Precision p) {
  switch (p) {
    case Precision::FP32:
      return "fp32";
    case Precision::BF16:
      return "bf16";
    case Precision::FP16:
      return "fp16";
  }
  TIDE_ASSERT(false);
}
std::string to_string(Offload o) {
  switch (o) {
    case Offload::None:
      return "none";
    case Offload::Optimizer:
      return "offload_optimizer";
    case Offload::All:
      return "offload_all";
  }
  TIDE_ASSERT(false);
}
std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  TIDE_ASSERT(false);
}
std::string to_string(Schedule s) {
  switch (s) {
    case Schedule::OneFOneB:
      return "1f1b";
    case Schedule::GPipe:
      return "gpipe";
    case Schedule::Interleaved:
      return "interleaved";
    case Schedule::ZBH1:
      return "zb-h1";
    case Schedule::ZBH2:
      return "zb-h2";
    case Schedule::ZBAuto:
      return "zb-auto";
    case Schedule::ZB1P:
      return "zb-1p";
    case Schedule::ZB2P:
      return "zb-2p";
    case Schedule::ZBV:
      return "zb-v";
  }
  TIDE_ASSERT(false);
}
std::string to_string(Optimizer o) {
  return o == Optimizer::AdamW ? "adamw" : "sgd";
}
std::string to_string(Placement p) {
  return p == Placement::Auto ? "auto" : "device";
}

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::FP32;
  if (s == "bf16") return Precision::BF16;
  if (s == "fp16") return Precision::FP16;
  TIDE_FAIL("unknown precision '{}'; use fp32, bf16 or fp16", s);
}
Placement parse_placement(const std::string& s) {
  if (s == "device") return Placement::Device;
  if (s == "auto") return Placement::Auto;
  TIDE_FAIL("unknown placement.policy '{}'; use device or auto", s);
}
Offload parse_offload(const std::string& s) {
  if (s == "none") return Offload::None;
  if (s == "offload_optimizer" || s == "optimizer") return Offload::Optimizer;
  if (s == "offload_all" || s == "all") return Offload::All;
  TIDE_FAIL("unknown offload placement '{}'; use none, offload_optimizer or offload_all", s);
}
Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::None;
  if (s == "selective") return Recompute::Selective;
  if (s == "full") return Recompute::Full;
  TIDE_FAIL("unknown activation_checkpointing.policy '{}'; use none, selective or full", s);
}
Schedule parse_schedule(const std::string& s) {
  if (s == "1f1b") return Schedule::OneFOneB;
  if (s == "gpipe") return Schedule::GPipe;
  if (s == "interleaved" || s == "interleaved-1f1b") return Schedule::Interleaved;
  if (s == "zb-h1" || s == "zb_h1") return Schedule::ZBH1;
  if (s == "zb-h2" || s == "zb_h2") return Schedule::ZBH2;
  if (s == "zb-auto" || s == "zb_auto") return Schedule::ZBAuto;
  if (s == "zb-1p" || s == "zb_1p") return Schedule::ZB1P;
  if (s == "zb-2p" || s == "zb_2p") return Schedule::ZB2P;
  if (s == "zb-v" || s == "zb_v") return Schedule::ZBV;
  TIDE_FAIL(
      "unknown pipeline.schedule '{}'; use 1f1b, gpipe, interleaved, zb-h1, zb-h2, zb-auto, "
      "zb-1p, zb-2p or zb-v",
      s);
}
Optimizer parse_optimizer(const std::string& s) {
  if (s == "adamw" || s == "adam" || s == "AdamW" || s == "Adam") return Optimizer::AdamW;
  if (s == "sgd" || s == "SGD") return Optimizer::SGD;
  TIDE_FAIL("unknown optimizer '{}'; use adamw or sgd", s);
}

}  // namespace tide
