#include "tide/config/check_settings.h"

#include "tide/config/pipeline_setup.h"
#include "tide/core/error.h"
#include "tide/model/layout.h"
#include "tide/optim/adamw.h"
#include "tide/optim/lr_schedule.h"

namespace tide {

namespace {

// What the optimizer and the schedule check at their first step, checked now (as the Trainer
// builds them), so that no bad value gets as far as out_dir.
void check_optimizer(const TrainConfig& c) {
  AdamWHyper h;
  h.lr = static_cast<float>(c.lr);
  h.beta1 = c.beta1;
  h.beta2 = c.beta2;
  h.eps = c.eps;
  h.weight_decay = c.weight_decay;
  h.decoupled = c.adam_w_mode;
  check_adamw_args(h, AdamWStep{1, 1.0f});
  check_lr_schedule(c.lr_schedule);
}

// Offload (parallel/offload_policy.h), and placement.policy=auto (parallel/auto_placement.h),
// which plans one store against the device budget from the accesses of its first step.
void check_memory_placement(const TrainConfig& c) {
  TIDE_CHECK(c.offload_param == "none" || c.offload_optimizer == "cpu",
             "zero_optimization.offload_param.device is \"cpu\" but offload_optimizer is not; "
             "offloading the parameters needs the optimizer on the host too, so set "
             "zero_optimization.offload_optimizer.device to \"cpu\"");
  TIDE_CHECK(!c.zero.offload_optimizer.delayed_update || c.zero.offload_optimizer.enabled,
             "zero_optimization.offload_optimizer.delayed_update=true needs "
             "zero_optimization.offload_optimizer.device=\"cpu\" (the delayed update is the CPU "
             "optimizer's); set the device or remove delayed_update");
  // On a GPU auto's budget defaults to the device's free memory less a margin
  // (memory/allocator.h); on the CPU and the simulated device the device is a stand-in whose size
  // only the key can give.
  TIDE_CHECK(
      c.placement_policy != "auto" || c.device_memory_limit > 0 || c.device.starts_with("cuda"),
      "placement.policy=\"auto\" needs placement.device_memory_limit > 0 on the CPU and "
      "the simulated device (the bytes of the budgeted allocator standing in for the "
      "device, which auto fills and evicts from; on a GPU it defaults to the free memory); "
      "set placement.device_memory_limit, or placement.policy=\"device\"");
  TIDE_CHECK(
      c.placement_policy != "auto" || (c.offload_optimizer == "none" && c.offload_param == "none"),
      "placement.policy=\"auto\" with zero_optimization.offload_optimizer/offload_param "
      "\"cpu\": auto decides where the optimizer state and the parameters live itself; "
      "set both offload devices to \"none\", or placement.policy=\"device\"");
}

void check_tensor_parallel(const TrainConfig& c) {
  const int t = c.tensor_parallel;
  const GPTConfig& m = c.model;
  TIDE_CHECK(!c.sequence_parallel || t > 1,
             "tensor_parallel.sequence_parallel=true shards the sequence over the "
             "tensor-parallel ranks, and tensor_parallel.size is 1; set tensor_parallel.size "
             "to 2 or more, or sequence_parallel to false");
  // Hidden size first: n_embd = n_head * head_size, so a size that fails here fails for the
  // heads too, and this message is the more direct one.
  TIDE_CHECK(m.n_embd % t == 0,
             "model.n_embd ({}) is not divisible by tensor_parallel.size ({}): the hidden size "
             "is split evenly over the tensor-parallel ranks; choose a size that divides {}",
             m.n_embd, t, m.n_embd);
  TIDE_CHECK(m.n_head % t == 0,
             "model.n_head ({}) is not divisible by tensor_parallel.size ({}): each "
             "tensor-parallel rank computes n_head/size whole heads; choose a size that divides "
             "{}",
             m.n_head, t, m.n_head);
  check_tensor_parallel_shape(m, t);  // the Llama family: key/value heads, MLP width
  TIDE_CHECK(!c.sequence_parallel || c.seq_len % t == 0,
             "seq_len ({}) is not divisible by tensor_parallel.size ({}) under "
             "tensor_parallel.sequence_parallel, which gives each rank seq_len/size positions; "
             "use a multiple of {} or turn sequence_parallel off",
             c.seq_len, t, t);
  // The vocabulary is padded to a multiple of t (ceil(V/t) rows per rank); the last rank must
  // still hold a real row. (vocab_size 0 comes from the data: the model checks it then.)
  if (t > 1 && m.vocab_size > 0) {
    const int64_t rows = vocab_rows_per_rank(m, t);
    TIDE_CHECK(int64_t{m.vocab_size} > (t - 1) * rows,
               "model.vocab_size ({}) padded to a multiple of tensor_parallel.size ({}) gives "
               "{} rows per rank and leaves the last rank no real row; use a smaller "
               "tensor_parallel.size",
               m.vocab_size, t, rows);
  }
  if (c.partition_activations) {
    TIDE_CHECK(c.activation_policy == ActivationPolicy::FULL,
               "activation_checkpointing.partition_activations partitions the block inputs "
               "that the full recompute policy keeps, and activation_checkpointing.policy is "
               "'{}'; set the policy to full, or partition_activations to false",
               activation_policy_name(c.activation_policy));
    TIDE_CHECK(t > 1,
               "activation_checkpointing.partition_activations slices the block inputs over "
               "the tensor-parallel ranks, and tensor_parallel.size is 1; set "
               "tensor_parallel.size to 2 or more, or partition_activations to false");
    TIDE_CHECK(!c.sequence_parallel,
               "activation_checkpointing.partition_activations with "
               "tensor_parallel.sequence_parallel: the block inputs are already 1/{} sequence "
               "shards, nothing more to partition; turn one of them off",
               t);
  }
  TIDE_CHECK(!c.cpu_checkpointing || c.partition_activations,
             "activation_checkpointing.cpu_checkpointing moves the partitioned block inputs to "
             "host memory and needs activation_checkpointing.partition_activations=true; turn "
             "it on, or cpu_checkpointing off");
}

// Schedules that run more than one model chunk per stage.
bool multi_chunk(const std::string& s) {
  return s == "interleaved" || s == "zb-v";
}

// The pipeline.* combinations, with the key names the user wrote rather than `tide schedule`'s
// flag names. With pipeline.stages = 1 only virtual_stages is checked (one stage runs every
// schedule the same).
void check_pipeline(const TrainConfig& c) {
  const int p = c.pipeline_stages, v = c.virtual_stages;
  const std::string& s = c.pipeline_schedule;
  if (p == 1) {
    TIDE_CHECK(v == 1,
               "pipeline.virtual_stages={} needs pipeline.stages > 1 (model chunks are spread "
               "over stages); set pipeline.stages, or virtual_stages to 1",
               v);
    return;
  }
  TIDE_CHECK(multi_chunk(s) || v == 1,
             "pipeline.virtual_stages={}: the {} schedule runs one model chunk per stage; set "
             "pipeline.virtual_stages to 1, or use pipeline.schedule=interleaved (or zb-v) for "
             "several",
             v, s);
  TIDE_CHECK(s != "interleaved" || v >= 2,
             "pipeline.schedule=interleaved needs pipeline.virtual_stages >= 2 (got {}); with one "
             "model chunk per stage use 1f1b",
             v);
  TIDE_CHECK(s != "zb-v" || v == 2,
             "pipeline.schedule=zb-v runs exactly two model chunks per stage (a V); set "
             "pipeline.virtual_stages to 2 or leave it out (got {})",
             v);
  TIDE_CHECK(c.model.n_layer % (p * v) == 0,
             "model.n_layer ({}) is not divisible by pipeline.stages x pipeline.virtual_stages = "
             "{} x {} = {}: every model chunk holds the same number of layers; change one of them",
             c.model.n_layer, p, v, p * v);
  TIDE_CHECK(s != "interleaved" || c.grad_accum % p == 0,
             "pipeline.schedule=interleaved needs gradient_accumulation_steps (the micro-batches "
             "per step, {}) to be a multiple of pipeline.stages ({}): micro-batches go through "
             "the chunks in groups of p; use gradient_accumulation_steps={}",
             c.grad_accum, p, (c.grad_accum + p - 1) / p * p);
  TIDE_CHECK(c.pipeline_memory_limit == 0 || c.pipeline_memory_limit >= 1,
             "pipeline.memory_limit={} is below one micro-batch's activations (1 M_B), so no "
             "schedule fits; raise it to at least 1, or 0 for the schedule's default",
             c.pipeline_memory_limit);
  try {
    make_pipeline_schedule(c);  // whatever the generator refuses (a memory limit nothing fits)
  } catch (const Error& e) {
    TIDE_FAIL("pipeline.schedule={} with pipeline.stages={}, gradient_accumulation_steps={}{}: {}",
              s, p, c.grad_accum,
              c.pipeline_memory_limit > 0
                  ? fmt::format(", pipeline.memory_limit={}", c.pipeline_memory_limit)
                  : "",
              e.what());
  }
}

// ZeRO-Offload and parameter offload against the ZeRO stage (DeepSpeed's rules).
void check_zero_and_layout(const TrainConfig& c) {
  TIDE_CHECK(c.offload_optimizer == "none" || c.zero.stage >= 1,
             "zero_optimization.offload_optimizer.device=\"cpu\" with zero_optimization.stage=0: "
             "ZeRO-Offload offloads the partitioned optimizer state of stages 1-3 (as DeepSpeed "
             "does); set zero_optimization.stage to 1, 2 or 3");
  // offload_param: DeepSpeed's rule, ZeRO stage 3 (the parameters are partitioned and gathered
  // per block; on one rank the "gather" copies the host slice, which is the whole chunk).
  TIDE_CHECK(c.offload_param == "none" || c.zero.stage == 3,
             "zero_optimization.offload_param.device=\"cpu\" with zero_optimization.stage={}: "
             "parameter offload needs ZeRO stage 3 (as in DeepSpeed); set "
             "zero_optimization.stage=3",
             c.zero.stage);
}

}  // namespace

void check_world_layout(const TrainConfig& c, int world) {
  const int replica = c.tensor_parallel * c.pipeline_stages;
  TIDE_CHECK(world % replica == 0,
             "world_size {}{} is not divisible by tensor_parallel.size x pipeline.stages = {} x {} "
             "= {}: the data-parallel degree is world_size / (tp x pp); set world_size to a "
             "multiple of {}, or change the layout",
             world, c.world_size == 0 ? " (0: one rank in tide estimate)" : "", c.tensor_parallel,
             c.pipeline_stages, replica, replica);
}

void check_settings(const TrainConfig& c) {
  check_optimizer(c);
  TIDE_CHECK(!(c.bf16 && c.fp16), "bf16.enabled and fp16.enabled cannot both be true");
  check_memory_placement(c);
  TIDE_CHECK(c.seq_len <= c.model.max_seq_len,
             "seq_len {} exceeds model.max_seq_len {}; lower seq_len or raise model.max_seq_len",
             c.seq_len, c.model.max_seq_len);
  GPTConfig shape = c.model;  // vocab_size 0 (from the data) is checked once it is known
  if (shape.vocab_size == 0) shape.vocab_size = 2;
  shape.validate();
  check_tensor_parallel(c);  // needs the shape and the activation policy
  check_pipeline(c);         // needs the shape, the batch and ZeRO
  check_zero_and_layout(c);
}

}  // namespace tide
