#pragma once
// Loss scaling for fp16 training: DeepSpeed's dynamic loss scaler, rule for rule
// (deepspeed/runtime/fp16/loss_scaler.py, DynamicLossScaler.update_scale, 0.19.8).
//
// Why: fp16 gradients underflow unless the loss is multiplied by a large factor S before
// backward; the gradients are then S times too large and the optimizer unscales them
// (AdamWStep::grad_scale = clip / S). S starts at 2^initial_scale_power. An overflow (a
// non-finite gradient on any rank: the global norm is not finite) skips the step; it halves S
// once `hysteresis` overflows have used up the tolerance (delayed shift), never below
// min_loss_scale, and an overflow at the minimum stops the run (DeepSpeed: "Current loss scale
// already at minimum"). After loss_scale_window steps without overflow S doubles (no upper
// bound) and the hysteresis refills; with consecutive_hysteresis every good step refills it.
// tests/fixtures/deepspeed_loss_scale.json (tools/gen_loss_scale_fixture.py) holds DeepSpeed's
// own scales for fixed overflow patterns.
//
// bf16 and f32 have f32's exponent range and need no scaling: StaticLossScaler (scale 1, or
// fp16.loss_scale's fixed scale) skips a step whose gradients are not finite and never
// changes its scale.

#include <cstdint>
#include <memory>

#include "tide/core/dtype.h"

namespace tide {

// DeepSpeed's fp16 section: its key names and defaults.
struct Fp16LossScale {
  double loss_scale = 0;  // 0: dynamic; else a fixed scale
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
  bool auto_cast = false;  // DeepSpeed casts the model's inputs; tide's inputs are token ids
  bool operator==(const Fp16LossScale&) const = default;
};

// A scaler's whole state, for checkpoints: a resumed run scales exactly as the straight one.
struct LossScalerState {
  double scale = 1;
  int64_t iter = 0;  // update() calls so far
  int64_t last_overflow_iter = -1;
  int hysteresis = 1;   // overflows still tolerated before the next halving
  int64_t skipped = 0;  // steps skipped so far
};

class LossScaler {
 public:
  virtual ~LossScaler() = default;
  // The factor the loss is multiplied by before backward.
  double scale() const { return s_.scale; }
  // Records whether this step's gradients overflowed and adapts the scale. Returns true when
  // the optimizer step applies, false when it is skipped. Throws a tide::Error when the run
  // cannot go on (an overflow at the minimum dynamic scale).
  virtual bool update(bool overflow) = 0;
  int64_t skipped_steps() const { return s_.skipped; }
  int hysteresis() const { return s_.hysteresis; }
  const LossScalerState& state() const { return s_; }
  void restore(const LossScalerState& s) { s_ = s; }

 protected:
  LossScalerState s_;
};

class DynamicLossScaler final : public LossScaler {
 public:
  // Throws a tide::Error naming the bad key and its valid range.
  explicit DynamicLossScaler(const Fp16LossScale& o = {});
  bool update(bool overflow) override;

 private:
  Fp16LossScale o_;
};

class StaticLossScaler final : public LossScaler {
 public:
  explicit StaticLossScaler(double scale = 1.0);
  bool update(bool overflow) override;
};

// The scaler a run needs: fp16 dynamic (fp16.loss_scale 0) or static at fp16.loss_scale;
// bf16 and f32 static at 1.
std::unique_ptr<LossScaler> make_loss_scaler(DType compute, const Fp16LossScale& o = {});

}  // namespace tide
