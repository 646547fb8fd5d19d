#include "tide/config/estimate_setup.h"

#include "tide/config/check_settings.h"
#include "tide/core/error.h"
#include "tide/data/prepare.h"
#include "tide/model/activations.h"

namespace tide {
namespace {

Recompute recompute_of(ActivationPolicy p) {
  switch (p) {
    case ActivationPolicy::SAVE_ALL:
      return Recompute::None;
    case ActivationPolicy::SELECTIVE:
      return Recompute::Selective;
    case ActivationPolicy::FULL:
      return Recompute::Full;
  }
  return Recompute::None;
}

}  // namespace

TrainSetup setup_from_train_config(const TrainConfig& c) {
  TrainSetup s;
  s.model = c.model;  // the shape the run uses (a preset's; max_seq_len 0 resolved to seq_len)
  if (s.model.vocab_size == 0 && !c.data_dir.empty() && prepared_corpus_exists(c.data_dir))
    s.model.vocab_size = read_prepared_corpus(c.data_dir).vocab_size;
  s.seq_len = c.seq_len;
  s.world_size = c.world_size > 0 ? c.world_size : 1;
  check_world_layout(c, s.world_size);
  s.tp = c.tensor_parallel;
  s.pp = c.pipeline_stages;
  s.sp = c.sequence_parallel;
  s.micro_batch = c.micro_batch;
  s.grad_accum = c.grad_accum;
  s.zero_stage = c.zero.stage;
  s.zero = c.zero;  // the dtypes below, per row: not zero_settings(c)'s, resolved for c's stage
  s.offload = c.offload_param == "cpu"       ? Offload::All
              : c.offload_optimizer == "cpu" ? Offload::Optimizer
                                             : Offload::None;
  s.recompute = recompute_of(c.activation_policy);
  s.partition_activations = c.partition_activations;
  s.cpu_checkpointing = c.cpu_checkpointing;
  s.precision = precision_of(model_dtype(c));
  // Only the keys given: each row of the estimate takes the defaults of its own stage
  // (grad_precision_of), not those of the configured stage.
  if (const auto g = given_grad_dtype(c)) s.grad_precision = precision_of(*g);
  if (const auto m = given_comm_dtype(c)) s.comm_precision = precision_of(*m);
  s.optimizer = parse_optimizer(c.optimizer_type);
  // Every schedule tide train runs (with one stage the schedule does not matter).
  s.schedule = parse_schedule(c.pipeline_schedule);
  s.memory_limit = c.pipeline_memory_limit;
  s.virtual_stages = c.virtual_stages;
  s.chunk_mib = c.chunk_size_mb;
  s.placement = parse_placement(c.placement_policy);
  s.device_memory_limit = c.device_memory_limit;
  s.on_device = on_device(c);
  s.pinned_host_tier = s.on_device && c.placement_pin_memory;
  return s;
}

TrainSetup read_estimate_config(const std::string& path) {
  return setup_from_train_config(load_train_config(path, {}, /*check_paths=*/false));
}

}  // namespace tide
