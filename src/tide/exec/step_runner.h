#pragma once
// StepRunner: what the Trainer asks of whatever runs its optimizer steps, so that its loop
// (data, logging, validation, checkpoints) is written once for both: the data-parallel Engine
// (engine.h: every rank holds the whole model) and the pipeline (pipeline_run.h: every rank
// holds its stage's model chunks and runs a PipelineEngine).

#include <cstddef>
#include <cstdint>

#include "tide/core/trace.h"
#include "tide/exec/engine.h"

namespace tide {

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // One optimizer step, `step` 0-based; `batch` fills micro-batch `micro`'s (B,T) inputs and
  // targets (the trainer's data). Every rank returns the same loss.
  virtual StepStats step(int64_t step, uint64_t seed, const Engine::BatchFn& batch,
                         Tracer* tracer) = 0;
  // Bytes of activation arenas, W stashes and communication buffers.
  virtual size_t activation_bytes() const = 0;
  // The executor's loss scaler (fp16), whose state checkpoints carry.
  virtual LossScaler& loss_scaler() = 0;
};

// The data-parallel runner: the Engine as it is.
class EngineRunner final : public StepRunner {
 public:
  explicit EngineRunner(Engine& engine) : engine_(engine) {}
  StepStats step(int64_t step, uint64_t seed, const Engine::BatchFn& batch,
                 Tracer* tracer) override {
    return engine_.step(step, seed, batch, tracer);
  }
  size_t activation_bytes() const override {
    return engine_.activation_bytes() + engine_.comm_buffer_bytes();
  }
  LossScaler& loss_scaler() override { return engine_.loss_scaler(); }

 private:
  Engine& engine_;
};

}  // namespace tide
