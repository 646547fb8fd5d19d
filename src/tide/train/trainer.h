#pragma once
// Trainer: the loop around the one step runner (step_runner.h) on the world's pp x dp x tp mesh
// (size-1 axes where unused). The runner holds this rank's model chunks (the whole model with
// pipeline.stages = 1, else its stage's) and runs a step (micro-batches, F/B/W, gradient
// reduction, optimizer), validation and checkpoints; the trainer feeds it data and does what
// happens between steps: logging, periodic validation, checkpoints and resuming from one.

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/comm/topology.h"
#include "tide/config/config.h"
#include "tide/core/trace.h"
#include "tide/data/loader.h"
#include "tide/model/gpt.h"
#include "tide/train/progress_line.h"
#include "tide/train/step_runner.h"
#include "tide/train/tensorboard_writer.h"

namespace tide {

class Trainer {
 public:
  // `world` = nullptr: single process. With a world of N ranks, each is one DP rank, or with
  // pipeline.stages = N one pipeline stage, or with tensor_parallel.size = t one tp rank of
  // data-parallel replica rank / t.
  Trainer(TrainConfig config, std::shared_ptr<ProcessGroup> world = nullptr);
  ~Trainer();

  // The whole run: progress line, metrics.jsonl, periodic validation, checkpoints.
  void run();
  // One optimizer step (no logging). The loss is the mean over the global batch. With
  // trace.steps = N, the steps after the first one this trainer takes (the warm-up: first-touch
  // page faults, buffer allocation) are traced, and after N of them every rank's events go to
  // rank 0, which writes the trace (collective, like the step itself).
  StepStats train_step();
  // Mean validation loss over the fixed validation set: its first eval.sequences sequences,
  // whatever the DP degree, micro-batch or accumulation (each rank scores a share; the mean
  // adds the per-sequence sums in sequence order, so it is the same to the bit). Under pp each
  // sequence goes through the stages (StepRunner::evaluate): the same to the bit too.
  float evaluate();

  // The model (under pp: this rank's first model chunk).
  GPT& model() { return *runner_->chunks()[0]; }
  // The step runner (this rank's model chunks) and its executor.
  const StepRunner& runner() const { return *runner_; }
  const PipelineEngine& engine() const { return runner_->engine(); }
  PipelineEngine& engine() { return runner_->engine(); }  // tests: set_gradient_hook
  // The allocators configure_store made (nullptr when the store uses its own).
  const Allocator* compute_allocator() const { return compute_alloc_.get(); }
  // The host tier of placement.policy=auto (every kind), of ZeRO-Offload (its optimizer kinds).
  const Allocator* host_allocator() const { return host_alloc_.get(); }
  // Bytes of model states the host tier holds (the allocators above, host side; 0 without).
  size_t host_tier_bytes() const;
  const TrainConfig& config() const { return cfg_; }
  int64_t step() const { return step_; }
  // True when, at the last step, some rank had been asked to stop (preemption.h); run() then
  // writes a checkpoint and returns.
  bool stop_agreed() const { return stop_agreed_; }
  // Bytes of model states (all chunks) plus the activation arenas and W stashes, the validation
  // micro-batch's arenas, ZeRO's communication buffers, cpu_checkpointing's host pool and
  // ZeRO-Offload's host gradient buffers: the progress line's `mem` (what `tide estimate`'s
  // per-GPU total counts: tests/cli/estimate_mem.sh).
  size_t memory_bytes() const;

  // Replaces the training data loader (tests feeding fixed batches): called with the step,
  // the micro-batch index and the (B,T) inputs and targets to fill.
  std::function<void(int64_t step, int micro, int32_t* inputs, int32_t* targets)> batch_source;

  // Writes a checkpoint `name` in out_dir (weights, optimizer state, run position; with
  // tokenizer.json beside it) that `checkpoint.resume` can continue from; returns its path.
  // ZeRO stage 0: one file, written by rank 0 (other ranks' calls write nothing). Stages 1-3 and
  // pipeline parallelism: a sharded directory (sharded_checkpoint.h), and every rank must call
  // it (collective). Tensor parallelism (any ZeRO stage): one whole-model file (tp_checkpoint.h;
  // shards and ZeRO slices gathered, rank 0 writes), collective.
  std::string save(const std::string& name = "model.ckpt") const;

 private:
  // The embedded default run: rank 0 prepares its corpus if it is missing (collective).
  void prepare_default_corpus();
  // Opens the data (no collective).
  void resolve_data();
  // The world as the pp x dp x tp mesh (comm/topology.h): dp = the world divided by the
  // pipeline stages and the tensor-parallel size. The shape alone, known before the mesh's
  // groups are built (the checks and the data need it first).
  MeshShape mesh_shape() const {
    return {.tp = cfg_.tensor_parallel,
            .dp = world_->size() / (cfg_.pipeline_stages * cfg_.tensor_parallel),
            .pp = cfg_.pipeline_stages};
  }
  int data_parallel_ranks() const { return mesh_shape().dp; }
  // The group the mesh is split from: world_, or on a device with more than one rank world_
  // with the device's collectives for device buffers. Collective over world_.
  std::shared_ptr<ProcessGroup> mesh_world() const;
  // This rank's data-parallel rank, its dp coordinate: the replica its tp group and pipeline
  // belong to.
  int data_parallel_rank() const { return mesh_shape().coord_of(world_->rank()).dp; }
  // Where a checkpoint left its run: the step and the data loader's position.
  struct RunPosition {
    int64_t step = 0;
    uint64_t data_epoch = 0, data_batch = 0;
    std::optional<LossScalerState> loss_scaler;
  };
  // checkpoint.resume=auto: cfg_.resume becomes the newest complete checkpoint in out_dir, or
  // empty (auto_resume.h); collective.
  void resolve_auto_resume();
  // Refuses a resume at `step` whose lr schedule differs from the one the checkpoint was trained
  // with, naming the keys (unless checkpoint.new_lr_schedule).
  void check_same_lr_schedule(const std::string& path, const CheckpointInfo& info,
                              int64_t step) const;
  // Reads and checks `path` (the whole file, and that it can continue this run's config).
  RunPosition check_resume(const std::string& path) const;
  // The tracer for the step about to be taken (nullptr outside the traced window).
  Tracer* step_tracer() const;
  // trace.path, or out_dir/trace.json.
  std::string trace_file() const;
  // Gathers every rank's events to rank 0, which writes trace.path (collective); ends tracing.
  void write_trace();
  // metrics.jsonl line, mirrored to TensorBoard when it is on (rank 0).
  void write_metrics(std::ofstream& f, const std::string& path, const nlohmann::json& line);
  // zb-auto's warm-up step (rank 0): one log line and one metrics record "pipeline_measured".
  void log_pipeline_measurement(const StepRunner::Measured& pm, std::ofstream& metrics,
                                const std::string& metrics_path);
  // run() without the handling of an open progress line.
  void run_steps();

  // The compute tier of the model state (placement.device_memory_limit) and, with ZeRO-Offload,
  // the host tier of the optimizer state: set in `so` when either is configured.
  // The step-0 validation (into `val0`) and the first train_step() of a placement.policy=auto
  // run, whose error (a budget too small) also says that nothing was written and what tide
  // estimate gives.
  StepStats first_placed_step(std::optional<float>& val0);
  // "; `tide estimate --config` puts the least limit ... at X", or "" where it cannot size it.
  std::string least_limit_hint() const;
  // The store options the config sets: dtypes (bf16), tiers and allocators (offload, placement).
  void configure_store(StoreOptions& so);
  // placement.policy=auto's allocators (configure_store made them); none with policy=device.
  AutoPlacementSettings auto_placement_settings() const;

  TrainConfig cfg_;
  std::shared_ptr<ProcessGroup> world_;
  // Declared before the model, whose chunks they hold (nullptr: the store's own host memory).
  std::unique_ptr<Allocator> compute_alloc_, host_alloc_;
  // ZeRO-Offload's f32 master and offload_param's slices: the host tier's copy ends, each
  // page-locked on a device as its pin_memory key says (nullptr where unused).
  std::unique_ptr<Allocator> master_alloc_, param_slices_alloc_;
  // The context the model's ops run on (device): the CPU's, or a stream of the simulated device
  // whose memory is compute_alloc_.
  OpContext op_;
  std::unique_ptr<Topology> mesh_;  // pp x dp x tp (size-1 axes where unused)
  std::unique_ptr<StepRunner> runner_;
  // The step's micro-batches, read before the step ((B,T) each, in order), since the executor
  // asks for a micro-batch once per model chunk, in schedule order.
  std::vector<int32_t> step_inputs_, step_targets_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::string tokenizer_path_;
  std::optional<double> unigram_;
  int64_t step_ = 0;
  bool stop_agreed_ = false;
  // Tracing (trace.steps): steps first_traced_ .. first_traced_ + trace.steps - 1 (1-based).
  std::unique_ptr<Tracer> tracer_;
  int64_t first_traced_ = 0;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0, tensorboard.enabled
  ProgressLine progress_;                           // rank 0's stdout (progress_line.h)
};

}  // namespace tide
