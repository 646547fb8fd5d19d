#pragma once
// The optimizer's settings and the one decision every update path takes from the global
// gradient norm (the synchronous update, post-validation, offload, auto placement).

#include <cstdint>

#include "tide/optim/adamw.h"
#include "tide/optim/loss_scaler.h"
#include "tide/optim/lr_schedule.h"

namespace tide {

struct OptimizerSettings {
  AdamWHyper adamw;        // lr is replaced by the schedule's value each step
  LrSchedule lr;           // DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR or constant
  float grad_clip = 1.0f;  // global-norm clipping; 0: off
  // A step whose global gradient norm is NaN/Inf: false, a clear error (the default); true,
  // the step is skipped (no parameter or Adam state changes; StepStats::skipped), as mixed-
  // precision trainers do on overflow. Adam's bias-correction step t and the learning rate
  // follow the step index either way, so a skipped step still counts in t.
  bool skip_non_finite = false;
  // fp16 (a store computing in f16): DeepSpeed's loss scaling (loss_scaler.h). An overflow
  // skips the step (skip_non_finite is implied), and, as in DeepSpeed, a skipped step advances
  // neither the learning-rate schedule nor Adam's step t.
  Fp16LossScale fp16;
};

// What the update of step `step` (0-based; under fp16 the applied steps so far) does, decided
// from the global gradient norm alone: a non-finite norm is a clear error, or a skip with
// OptimizerSettings::skip_non_finite (set under fp16: an overflow); otherwise
// AdamW at the schedule's lr with the clip coefficient (1 when clipping is off or inactive)
// taken on the unscaled norm. The one decision of the synchronous and the post-validated
// updates. `grad_norm` is the norm of the gradients as they are, `loss_scale` times the true one.
struct UpdatePlan {
  bool skip = false;
  float lr = 0;
  float clip = 1.0f;  // AdamWStep::grad_scale: the clip coefficient over the loss scale
};
UpdatePlan plan_update(const OptimizerSettings& opt, int64_t step, double grad_norm,
                       double loss_scale = 1.0);
}  // namespace tide
