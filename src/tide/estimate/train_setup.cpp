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

Placement parse_placement(const std::string& s) {
  if (s == "device") return Placement::Device;
  if (s == "auto") return Placement::Auto;
  TIDE_FAIL("unknown placement.policy '{}'; use device or auto", s);
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
