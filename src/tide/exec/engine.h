#pragma once
// Engine: plain data parallelism, the one-stage schedule (F, B, W per micro-batch) of the one
// executor (PipelineEngine, pipeline_engine.h), with the policy stack (policy_stack.h) on the
// model's store: ZeRO stage 0's overlapped all-reduce or ZeroPolicy (stages 1-3), PatrickStar
// placement (placement.policy=auto: the store built with every kind on `host`), and ZeRO-Offload
// (the store built with StoreOptions::separate_master, its MASTER/ADAM chunks on a host-tier
// allocator). The update is synchronous (no post-validation: one stage has no bubble to fill).
//
// The model does all parameter access through store.acquire/release; the engine never sets a
// tensor state.

#include <memory>

#include "tide/exec/pipeline_engine.h"

namespace tide {

// The schedule of plain data parallelism: F(m), B(m), W(m) for every micro-batch in order.
// `split_backward` = false runs B and W fused per block (the least memory).
pipeline::Schedule data_parallel_schedule(int micro_batches, bool split_backward = false);

// Tensor parallelism (Megatron-LM) x data parallelism: the engine takes the tp group from the
// model (ModelOptions::tp) and the dp group here. What a caller (the Trainer) passes:
//
//   Topology mesh(world, MeshShape{.tp = t, .dp = world->size() / t});  // comm/topology.h
//   ModelOptions mo;  mo.tp = mesh.group_ptr(MeshAxis::TP);  mo.sequence_parallel = sp;
//   mo.group_size = mesh.dp().size();  // the store is sliced over dp only (ZeRO)
//   GPT model(config, policy, mo);
//   Engine engine(model, mesh.group_ptr(MeshAxis::DP), schedule, B, T, opt, zero);
//
// and a BatchFn that gives every tp rank of a data-parallel replica the same micro-batches
// (the replica's: dp rank r of mesh.coord().dp). Gradient reductions (stage 0's all-reduce,
// ZeroPolicy) run over dp only; the model's own collectives run over tp. The global gradient
// norm sums each tensor's squares over the dp slices and, for tensors split over tp
// (tp_sharded), over the tp ranks; a replicated tensor (bitwise equal on every tp rank) is
// counted once. The per-tensor sums are added in the model's tensor order, so every rank gets
// the same bits for any thread count. With ZeRO-Offload the per-tensor sums of the owned slices
// come from the offload thread's host copies (OffloadPolicy::tensor_sums(), tensor_grad_sums.h:
// the same function over the same ranges), the rest as without it.
class Engine : public PipelineEngine {
 public:
  // `dp` is the data-parallel group (size 1: a single rank). Micro-batches are (B,T).
  // `zero.stage` 1-3 needs a store sliced by zero_sliced_kinds() over the dp group.
  Engine(GPT& model, std::shared_ptr<ProcessGroup> dp, pipeline::Schedule schedule, int B, int T,
         OptimizerSettings optimizer, ZeroSettings zero = {}, AutoPlacementSettings placement = {});
};

}  // namespace tide
