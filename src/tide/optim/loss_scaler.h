#pragma once
// Loss scaling for mixed precision (Micikevicius et al., "Mixed Precision Training").
//
// fp16 gradients underflow unless the loss is multiplied by a large factor S before backward;
// the gradients are then S times too large and the optimizer unscales them with
// AdamWStep::grad_scale = 1/S (times the clip coefficient). S is chosen dynamically: start high
// (2^16); when a step's gradients overflow (NaN/Inf), skip the step and halve S; after
// growth_interval consecutive good steps, double it. This is torch.cuda.amp.GradScaler's
// rule, with DeepSpeed's floor min_scale.
//
// bf16 and f32 have f32's exponent range and need no scaling: StaticLossScaler (scale 1 by
// default) still skips a step whose gradients are not finite, but never changes its scale.
//
// Use:   loss * scaler.scale()  -> backward -> found = !isfinite(grad_norm_squared(...))
//        if (scaler.update(found)) adamw(..., grad_scale = scaler.inv_scale() * clip)

#include <cstdint>
#include <memory>

#include "tide/core/dtype.h"

namespace tide {

class LossScaler {
 public:
  virtual ~LossScaler() = default;
  // The factor the loss is multiplied by before backward.
  virtual float scale() const = 0;
  float inv_scale() const { return 1.0f / scale(); }
  // Records the outcome of this step's gradients and adapts the scale. Returns true when the
  // optimizer step should be applied, false when it must be skipped (non-finite gradients).
  virtual bool update(bool found_nonfinite) = 0;
  int64_t skipped_steps() const { return skipped_; }

 protected:
  int64_t skipped_ = 0;
};

struct DynamicLossScalerOptions {
  float init_scale = 65536.0f;  // 2^16
  float backoff_factor = 0.5f;  // on overflow
  float growth_factor = 2.0f;   // after growth_interval good steps
  int64_t growth_interval = 1000;
  float min_scale = 1.0f;         // the scale never goes below this
  float max_scale = 16777216.0f;  // 2^24: beyond this, scaled fp16 gradients overflow anyway
};

class DynamicLossScaler final : public LossScaler {
 public:
  // Throws a tide::Error naming the bad option and its valid range.
  explicit DynamicLossScaler(const DynamicLossScalerOptions& o = {});
  float scale() const override { return scale_; }
  bool update(bool found_nonfinite) override;
  int64_t good_steps() const { return good_steps_; }  // since the last overflow or growth

 private:
  DynamicLossScalerOptions o_;
  float scale_;
  int64_t good_steps_ = 0;
};

class StaticLossScaler final : public LossScaler {
 public:
  explicit StaticLossScaler(float scale = 1.0f);
  float scale() const override { return scale_; }
  bool update(bool found_nonfinite) override;

 private:
  float scale_;
};

// The scaler a run with this compute dtype needs: dynamic for f16, static 1 for bf16/f32.
std::unique_ptr<LossScaler> make_loss_scaler(DType compute, const DynamicLossScalerOptions& o = {});

}  // namespace tide
