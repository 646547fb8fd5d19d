#pragma once
// Trainer: the loop around the engine. The Engine runs a step (micro-batches, F/B/W, gradient
// reduction, optimizer); the trainer feeds it data and does what happens between steps:
// logging, periodic validation, checkpoints and resuming from one.

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/core/trace.h"
#include "tide/data/loader.h"
#include "tide/model/gpt.h"
#include "tide/train/config.h"
#include "tide/train/engine.h"
#include "tide/train/tensorboard_writer.h"

namespace tide {

class Trainer {
 public:
  // `world` = nullptr: single process. With a world of N ranks, each is one DP rank.
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
  // adds the per-sequence sums in sequence order, so it is the same to the bit).
  float evaluate();

  GPT& model() { return *model_; }
  const Engine& engine() const { return *engine_; }
  const TrainConfig& config() const { return cfg_; }
  int64_t step() const { return step_; }
  // True when, at the last step, some rank had been asked to stop (preemption.h); run() then
  // writes a checkpoint and returns.
  bool stop_agreed() const { return stop_agreed_; }
  // Bytes of model states (all chunks) plus the activation arenas and W stashes.
  size_t memory_bytes() const;

  // Replaces the training data loader (tests feeding fixed batches): called with the step,
  // the micro-batch index and the (B,T) inputs and targets to fill.
  std::function<void(int64_t step, int micro, int32_t* inputs, int32_t* targets)> batch_source;

  // Writes a checkpoint `name` in out_dir (weights, optimizer state, run position; with
  // tokenizer.json beside it) that `checkpoint.resume` can continue from; returns its path.
  // ZeRO stage 0: one file, written by rank 0 (other ranks' calls write nothing). Stages 1-3: a
  // sharded directory (sharded_checkpoint.h), and every rank must call it (collective).
  std::string save(const std::string& name = "model.ckpt") const;

 private:
  void resolve_data();
  // Where a checkpoint left its run: the step and the data loader's position.
  struct RunPosition {
    int64_t step = 0;
    uint64_t data_epoch = 0, data_batch = 0;
  };
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

  TrainConfig cfg_;
  std::shared_ptr<ProcessGroup> world_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<MicroBatch> eval_mb_;  // one sequence: validation does not depend on batching
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::string tokenizer_path_;
  std::optional<double> unigram_;
  int64_t step_ = 0;
  bool stop_agreed_ = false;
  // Tracing (trace.steps): steps first_traced_ .. first_traced_ + trace.steps - 1 (1-based).
  std::unique_ptr<Tracer> tracer_;
  int64_t first_traced_ = 0;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0, tensorboard.enabled
};

}  // namespace tide
