#pragma once
// Trainer: the training loop. It composes the model (GPT over a chunk store), the data
// loaders, data parallelism (ZeRO stage 0 over a ProcessGroup) and AdamW.
//
// One optimizer step:
//   for each of grad_accum micro-batches: read this rank's slice of the global batch,
//     forward, backward (gradients accumulate in the GRAD chunks). On the last micro-batch,
//     each chunk's gradients are all-reduced (averaged over DP ranks) asynchronously as soon
//     as the chunk is complete, while backward continues on earlier blocks.
//   wait for the reductions; global gradient norm -> clip coefficient; AdamW per tensor.

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/data/loader.h"
#include "tide/model/gpt.h"
#include "tide/train/config.h"

namespace tide {

struct StepStats {
  int64_t step = 0;  // 1-based index of the step just taken
  float loss = 0;    // mean training loss over the global batch
  float lr = 0;
  double grad_norm = 0;     // before clipping
  double seconds = 0;       // wall time of the step
  double comm_seconds = 0;  // time spent waiting for gradient reductions after backward
  int64_t tokens = 0;       // tokens in the global batch
  // Data parallelism: gradient all-reduces issued this step (one per non-empty chunk, on the
  // last micro-batch only) and the bytes this rank sent for them (communication counters).
  int grad_reductions = 0;
  uint64_t grad_bytes_sent = 0;
};

class Trainer {
 public:
  // `world` = nullptr: single process. With a world of N ranks, each is one DP rank.
  Trainer(TrainConfig config, std::shared_ptr<ProcessGroup> world = nullptr);
  ~Trainer();

  // The whole run: progress line, metrics.jsonl, periodic validation, final checkpoint.
  void run();
  // One optimizer step (no logging).
  StepStats train_step();
  // Mean validation loss over eval.steps batches (the same batches every time).
  float evaluate();

  GPT& model() { return *model_; }
  const TrainConfig& config() const { return cfg_; }
  int64_t step() const { return step_; }
  // Bytes of model states (all chunks) plus the peaks of the activation arenas.
  size_t memory_bytes() const;

  // Replaces the training data loader (tests feeding fixed batches): called with the step,
  // the micro-batch index and the (B,T) inputs and targets to fill.
  std::function<void(int64_t step, int micro, int32_t* inputs, int32_t* targets)> batch_source;

  // Writes the final checkpoint (model.ckpt in out_dir, with tokenizer.json beside it).
  std::string save(const std::string& name = "model.ckpt") const;

 private:
  void resolve_data();
  void apply_optimizer(float lr, float clip_coef);
  // The average of x over the data-parallel ranks (x itself with one rank).
  float mean_over_ranks(float x) const;

  TrainConfig cfg_;
  std::shared_ptr<ProcessGroup> world_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<MicroBatch> mb_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::vector<WorkPtr> pending_;  // in-flight gradient reductions of this step
  std::string tokenizer_path_;
  std::optional<double> unigram_;
  int64_t step_ = 0;
};

}  // namespace tide
