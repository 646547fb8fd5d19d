#include "tide/estimate/train_setup.h"

#include <fmt/format.h>

#include <algorithm>

#include "tide/core/error.h"
#include "tide/memory/chunk_layout.h"

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
  TIDE_CHECK(offload == Offload::None || zero_stage >= 1,
             "offload_optimizer needs ZeRO (the host keeps this rank's optimizer partition); set "
             "zero_optimization.stage to 1, 2 or 3, or turn offload off");
  TIDE_CHECK(offload != Offload::All || zero_stage == 3,
             "offload_param needs zero_optimization.stage 3 (only stage 3 partitions the "
             "parameters); set stage 3 or set offload_param.device to \"none\"");
  TIDE_CHECK(chunk_mib >= 0, "chunk_size_mb must be >= 0, 0 being automatic (got {})", chunk_mib);
  TIDE_CHECK(gpus_per_host >= 0, "gpus per host must be positive (got {})", gpus_per_host);
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
  return s;
}

int bytes_per_param(Precision p) {
  return p == Precision::FP32 ? 4 : 2;
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
  }
  TIDE_ASSERT(false);
}
std::string to_string(Optimizer o) {
  return o == Optimizer::AdamW ? "adamw" : "sgd";
}

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::FP32;
  if (s == "bf16") return Precision::BF16;
  if (s == "fp16") return Precision::FP16;
  TIDE_FAIL("unknown precision '{}'; use fp32, bf16 or fp16", s);
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
  TIDE_FAIL("unknown pipeline.schedule '{}'; use 1f1b, gpipe, interleaved, zb-h1 or zb-h2", s);
}
Optimizer parse_optimizer(const std::string& s) {
  if (s == "adamw" || s == "adam" || s == "AdamW" || s == "Adam") return Optimizer::AdamW;
  if (s == "sgd" || s == "SGD") return Optimizer::SGD;
  TIDE_FAIL("unknown optimizer '{}'; use adamw or sgd", s);
}

}  // namespace tide
