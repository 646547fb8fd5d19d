#include "tide/exec/update_plan.h"

#include <cmath>

#include "tide/core/error.h"
#include "tide/optim/grad_norm.h"

namespace tide {

UpdatePlan plan_update(const OptimizerSettings& opt, int64_t step, double grad_norm,
                       double loss_scale) {
  UpdatePlan plan;
  plan.lr = static_cast<float>(lr_at(step, opt.lr));
  if (!std::isfinite(grad_norm)) {
    TIDE_CHECK(opt.skip_non_finite,
               "the gradient norm at step {} is not finite (NaN/Inf); lower the learning rate, "
               "enable gradient_clipping, or skip such steps (skip_non_finite)",
               step + 1);
    plan.skip = true;
    return plan;
  }
  const float clip =
      opt.grad_clip > 0 ? clip_coefficient(grad_norm / loss_scale, opt.grad_clip) : 1.0f;
  plan.clip = static_cast<float>(clip / loss_scale);  // exact for scale 1 (f32, bf16)
  return plan;
}

}  // namespace tide
