#pragma once
// PipelineRun: the Trainer's step runner under pipeline parallelism (pipeline.stages = p > 1,
// one stage per rank). It owns this rank's model chunks (one GPT per chunk, built for its
// virtual stage: ModelOptions{.pp = p x chunks, .stage}) and the PipelineEngine running the
// configured schedule (pipeline_setup.h) over gradient_accumulation_steps micro-batches. Beside
// the step it does what differs from the data-parallel run between steps:
//
//   evaluate     each validation sequence goes through the virtual stages in order (the
//                activation sent to the next stage's rank, or copied when it is on this one);
//                the last one's per-sequence loss sum is broadcast. The same ops as the
//                single-rank forward, so the mean is the same to the bit.
//   save/load    a sharded checkpoint directory: each rank writes its stage's tensors whole
//                (save_pipeline_stage_shard); any run (another pp, pp = 1, tide sample,
//                tide export) reads it as any sharded checkpoint.
//   zb-auto      pipeline.schedule = zb-auto is built from measurement: the first step this
//                object runs (step 0 of a fresh run, or the first after a resume) runs 1F1B
//                traced and measured (auto_schedule_step, pipeline_measure.h), and the engine
//                switches to the zero-bubble schedule generated from the measured T_F/T_B/T_W/
//                T_comm (the same on every rank: the figures are gathered). Every schedule trains
//                bitwise alike, so the warm-up step is an ordinary training step.

#include <memory>
#include <vector>

#include "tide/checkpoint/checkpoint.h"
#include "tide/comm/process_group.h"
#include "tide/comm/topology.h"
#include "tide/config/config.h"
#include "tide/data/loader.h"
#include "tide/exec/pipeline_engine.h"
#include "tide/exec/pipeline_measure.h"
#include "tide/exec/step_runner.h"

namespace tide {

// Tensor parallelism inside the pipeline's stages (the Trainer passes tensor_parallel.size and
// .sequence_parallel): `size` ranks per stage (1: none), Megatron's sequence parallelism over
// them.
struct PipelineTensorParallel {
  int size = 1;
  bool sequence_parallel = false;
};

class PipelineRun final : public StepRunner {
 public:
  // Collective over `world` = pipeline.stages x dp x tp.size ranks: the (pp, dp, tp) groups come
  // from the topology mesh (comm/topology.h, Megatron order: rank = tp_idx + tp * (dp_idx + dp *
  // stage), as train_pipeline_dp's and train_pipeline_tp's tests build them). Each dp replica
  // runs the schedule's micro-batches of its own (replica d's micro-batch mb is global
  // micro-batch mb * dp + d); ZeRO-1 slices the optimizer state over dp, ZeRO-2 the gradients
  // too, ZeRO-3 the parameters too (pipeline_engine.h). With tp.size > 1 every
  // chunk is built with ModelOptions::tp = the mesh's tp group (and tp.sequence_parallel), and
  // the `batch` of step() must give every tp rank of replica d the same micro-batches:
  // replica d = dp().rank(), the mesh's dp coordinate, not the world rank. The chunks are
  // initialised from cfg.seed as the whole model would be (the same values element by element).
  // A world that is not stages x tp x (a whole number of replicas) is a clear error.
  // `store`: the allocators and offload options of every chunk's store (the Trainer's tiers:
  // Trainer::configure_store); `placement`: placement.policy=auto's allocators. `op` and
  // `activations`: the device every chunk runs on and its activation memory (ModelOptions; the
  // simulated device: each stage's messages wait for its stream, pipeline_engine.h).
  PipelineRun(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world,
              const OptimizerSettings& opt, PipelineTensorParallel tp = {},
              const StoreOptions& store = {}, AutoPlacementSettings placement = {},
              const OpContext& op = {}, Allocator* activations = nullptr);
  // The same on a mesh the caller built (the Trainer's one mesh: pp = pipeline.stages, its tp
  // axis tensor_parallel.size); the run keeps its axis groups.
  PipelineRun(const TrainConfig& cfg, const Topology& mesh, const OptimizerSettings& opt,
              bool sequence_parallel, const StoreOptions& store = {},
              AutoPlacementSettings placement = {}, const OpContext& op = {},
              Allocator* activations = nullptr);

  // (The zb-auto warm-up step traces itself: `tracer` does not record that step.)
  StepStats step(int64_t step, uint64_t seed, const Engine::BatchFn& batch,
                 Tracer* tracer) override;
  size_t activation_bytes() const override;
  LossScaler& loss_scaler() override { return engine_->loss_scaler(); }

  // Mean loss over validation sequences [0, n) of `val` (micro-batch 1, no shuffle), on every
  // rank (collective). Every replica's pipeline evaluates all of them (the replicas hold the
  // same parameters bitwise, so they agree to the bit; no message between replicas).
  float evaluate(DataLoader& val, int64_t n);
  // Every rank writes its shard into `path` (a sharded directory), rank 0 commits it
  // (collective over the world). ZeRO-0: replica 0 of each stage writes the stage whole (the
  // replicas are equal); ZeRO-1/2: every (stage, replica) writes its slices. With tensor
  // parallelism each chunk's tp shards (under ZeRO-1/2 its dp slices first) are gathered to
  // (tp 0, dp 0) (tp_checkpoint.h), which writes the stage's tensors whole: the checkpoint of
  // a ZeRO-0 run without tp.
  void save(const std::string& path, const CheckpointInfo& info) const;
  // Loads this rank's tensors (and Adam state) from the sharded checkpoint `path` (with tp:
  // each rank reads its stage's tensors whole and keeps its shard's elements, under ZeRO-1/2
  // its slice of them).
  void load(const std::string& path);
  // ZeRO-Offload's delayed update lands now (before a checkpoint is written).
  void flush_update() { engine_->flush_update(); }
  // init_from: the parameters of checkpoint `path` (a single file or a sharded directory, any
  // writer; init_from.h checks the shape) into every chunk, with tp each rank's shard of them.
  void init_from(const std::string& path);

  const std::vector<std::unique_ptr<GPT>>& chunks() const { return chunks_; }
  const PipelineEngine& engine() const { return *engine_; }
  // The replicas' group of this stage (size 1 without data parallelism) and this rank's
  // pipeline group.
  ProcessGroup& dp() const { return *dp_; }
  ProcessGroup& pp() const { return *pp_; }
  // The stage's tensor-parallel group (size 1 without tensor parallelism).
  ProcessGroup& tp() const { return *tp_; }
  // Whether this rank's chunks read the micro-batches' tokens (the first virtual stage) or
  // targets (the last).
  bool needs_data() const;

  // zb-auto: the warm-up step's measurement and the generated schedule's simulated run under
  // the measured per-stage costs.
  struct Measured {
    StepMeasurement measurement;
    pipeline::SimResult simulated;
  };
  // The measurement of the step just run, once (then nullptr until another is measured): for
  // the Trainer's log line and metrics record. Every rank returns the same.
  const Measured* take_new_measurement() {
    if (!measured_new_) return nullptr;
    measured_new_ = false;
    return &measured_;
  }

 private:
  std::shared_ptr<ProcessGroup> world_, pp_, dp_, tp_;  // pp_, dp_, tp_: the topology mesh's
  bool zero_sliced_ = false;                            // ZeRO-1 or 2 with dp > 1
  std::vector<std::unique_ptr<GPT>> chunks_;
  std::unique_ptr<PipelineEngine> engine_;
  std::vector<std::unique_ptr<MicroBatch>> eval_mbs_;  // per chunk, one sequence
  bool measure_pending_ = false;  // zb-auto: the next step is the measured warm-up
  double memory_limit_ = 0;       // zb-auto's pipeline.memory_limit (M_B; 0: 1F1B's peak)
  bool measured_new_ = false;
  Measured measured_;
};

}  // namespace tide
