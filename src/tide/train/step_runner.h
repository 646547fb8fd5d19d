#pragma once
// StepRunner: the Trainer's one step runner, for every layout of the pp x dp x tp mesh. It owns
// this rank's model chunks (one GPT per chunk, built for its virtual stage: ModelOptions{.pp =
// stages x chunks, .stage}; with pipeline.stages = 1 one chunk, the whole model) and the one
// executor (PipelineEngine) running the schedule: with pipeline.stages = 1 the data-parallel
// schedule (F, B, W per micro-batch, engine.h), else the configured pipeline schedule
// (pipeline_setup.h) over gradient_accumulation_steps micro-batches. Beside the step it does
// what happens to the model between steps:
//
//   evaluate     each data-parallel replica scores a share of the validation sequences, each
//                going through the virtual stages in order (the activation sent to the next
//                stage's rank, or copied when it is on this one); the last stage's per-sequence
//                loss sums are broadcast over the pipeline and gathered over the replicas. The
//                same ops as the single-rank forward, added in sequence order: the same bits.
//   save/load    save writes one file where one rank can hold the whole model (one stage, no
//                ZeRO slices to write: ZeRO-0, or tensor-parallel shards gathered to rank 0),
//                else a sharded directory of one file per (stage, replica)
//                (save_pipeline_stage_shard); load reads any checkpoint by tensor name and
//                element range (checkpoint_source.h), whatever wrote it.
//   init_from    a checkpoint's parameters into every chunk (with tp each rank's shard).
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

namespace tide {

class StepRunner {
 public:
  // Collective over the mesh's world (the Trainer's one mesh: pp = pipeline.stages, tp =
  // tensor_parallel.size, Megatron order rank = tp_idx + tp * (dp_idx + dp * stage)). Each dp
  // replica runs the schedule's micro-batches of its own (replica d's micro-batch mb is global
  // micro-batch mb * dp + d); ZeRO-1 slices the optimizer state over dp, ZeRO-2 the gradients
  // too, ZeRO-3 the parameters too. With tp > 1 every chunk is built over the mesh's tp group
  // (with cfg.sequence_parallel), and the `batch` of step() must give every tp rank of replica
  // d the same micro-batches: replica d = dp().rank(), the mesh's dp coordinate, not the world
  // rank. The chunks are initialised from cfg.seed as the whole model would be (the same values
  // element by element). `store`: the allocators, dtypes and offload options of every chunk's
  // store (Trainer::configure_store); `placement`: placement.policy=auto's allocators. `op` and
  // `activations`: the device every chunk runs on and its activation memory (ModelOptions).
  StepRunner(const TrainConfig& cfg, const Topology& mesh, const OptimizerSettings& opt,
             const StoreOptions& store = {}, AutoPlacementSettings placement = {},
             const OpContext& op = {}, Allocator* activations = nullptr);
  // The same on a bare world, split into the mesh cfg asks for (pipeline.stages x dp x
  // tensor_parallel.size); a world that is not a whole number of replicas is a clear error.
  StepRunner(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world,
             const OptimizerSettings& opt);

  // One optimizer step, `step` 0-based; `batch` fills micro-batch `micro`'s (B,T) inputs and
  // targets. Every rank of a replica returns the replica's loss. (The zb-auto warm-up step
  // traces itself: `tracer` does not record that step.)
  StepStats step(int64_t step, uint64_t seed, const PipelineEngine::BatchFn& batch, Tracer* tracer);
  // Bytes of activation arenas, W stashes, communication buffers and the validation
  // micro-batches.
  size_t activation_bytes() const;
  // Bytes of the model states of every chunk.
  size_t model_state_bytes() const;
  LossScaler& loss_scaler() { return engine_->loss_scaler(); }

  // Mean loss over validation sequences [0, n) of `val` (micro-batch 1, no shuffle), on every
  // rank (collective).
  float evaluate(DataLoader& val, int64_t n);
  // Writes the checkpoint `path` (collective over the world, except one stage at ZeRO-0 without
  // tp: rank 0 writes the file alone). ZeRO-1..3 without tp: every (stage, replica) writes its
  // slices; with tp each chunk's shards (under ZeRO-1..3 its dp slices first) are gathered to
  // (tp 0, dp 0) (tp_checkpoint.h), which writes the stage's tensors whole. Either way the
  // tensors any reader sees are the single-rank model's.
  void save(const std::string& path, const CheckpointInfo& info) const;
  // Whether save() is collective (every rank must call it), or rank 0 writes alone.
  bool save_is_collective() const;
  // Loads this rank's tensors (and Adam state) from any checkpoint `path` (with tp: each rank
  // reads its stage's tensors whole and keeps its shard's elements; of a ZeRO-sliced kind only
  // its slice).
  void load(const std::string& path);
  // ZeRO-Offload's delayed update lands now (before a checkpoint is written).
  void flush_update() { engine_->flush_update(); }
  // init_from: the parameters of checkpoint `path` (a single file or a sharded directory, any
  // writer; init_from.h checks the shape) into every chunk, with tp each rank's shard of them.
  void init_from(const std::string& path);

  const std::vector<std::unique_ptr<GPT>>& chunks() const { return chunks_; }
  const PipelineEngine& engine() const { return *engine_; }
  PipelineEngine& engine() { return *engine_; }
  // The replicas' group of this stage (size 1 without data parallelism), this rank's pipeline
  // group and the stage's tensor-parallel group (size 1 when unused).
  ProcessGroup& dp() const { return *dp_; }
  ProcessGroup& pp() const { return *pp_; }
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
  bool zero_sliced_ = false;                            // ZeRO-1..3
  bool collective_forward_ = false;  // ZeRO-3: a forward gathers parameters over dp
  // On a device: page-locked host memory for the models' copy ends (ModelOptions::host_staging);
  // declared first, as everything below holds some of it.
  std::unique_ptr<Allocator> host_staging_;
  OpContext copies_;  // the models' copy stream (ModelOptions::copies): make_copy_context(op)
  std::vector<std::unique_ptr<GPT>> chunks_;
  std::vector<std::unique_ptr<MicroBatch>> eval_mbs_;  // per chunk, one sequence
  // Declared after the evaluation micro-batches, so destroyed before them: its destructor
  // waits for the device's stream, which may still run an evaluation's ops on their memory
  // when an error left the evaluation half-queued.
  std::unique_ptr<PipelineEngine> engine_;
  bool measure_pending_ = false;  // zb-auto: the next step is the measured warm-up
  double memory_limit_ = 0;       // zb-auto's pipeline.memory_limit (M_B; 0: 1F1B's peak)
  bool measured_new_ = false;
  Measured measured_;
};

}  // namespace tide
