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

#include <memory>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/data/loader.h"
#include "tide/train/checkpoint.h"
#include "tide/train/config.h"
#include "tide/train/pipeline_engine.h"
#include "tide/train/step_runner.h"

namespace tide {

class PipelineRun final : public StepRunner {
 public:
  // Collective over `world` (= the pipeline group: one stage per rank). The chunks are
  // initialised from cfg.seed as the whole model would be (the same values tensor by tensor).
  PipelineRun(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world,
              const OptimizerSettings& opt);

  StepStats step(int64_t step, uint64_t seed, const Engine::BatchFn& batch,
                 Tracer* tracer) override {
    return engine_->step(step, seed, batch, tracer);
  }
  size_t activation_bytes() const override;

  // Mean loss over validation sequences [0, n) of `val` (micro-batch 1, no shuffle), on every
  // rank (collective).
  float evaluate(DataLoader& val, int64_t n);
  // Every rank writes its shard into `path` (a sharded directory), rank 0 commits it
  // (collective).
  void save(const std::string& path, const CheckpointInfo& info) const;
  // Loads this rank's tensors (and Adam state) from the sharded checkpoint `path`.
  void load(const std::string& path);

  const std::vector<std::unique_ptr<GPT>>& chunks() const { return chunks_; }
  const PipelineEngine& engine() const { return *engine_; }
  // Whether this rank's chunks read the micro-batches' tokens (the first virtual stage) or
  // targets (the last).
  bool needs_data() const;

 private:
  std::shared_ptr<ProcessGroup> world_;
  std::vector<std::unique_ptr<GPT>> chunks_;
  std::unique_ptr<PipelineEngine> engine_;
  std::vector<std::unique_ptr<MicroBatch>> eval_mbs_;  // per chunk, one sequence
};

}  // namespace tide
