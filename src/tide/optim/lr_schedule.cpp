#include "tide/optim/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "tide/core/error.h"

namespace tide {

void check_lr_schedule(const LrSchedule& s) {
  TIDE_CHECK(std::isfinite(s.lr) && s.lr >= 0.0f, "learning rate {} must be finite and >= 0", s.lr);
  TIDE_CHECK(s.min_lr >= 0.0f && s.min_lr <= s.lr,
             "min_lr = {} must lie in [0, lr = {}]; set min_lr = lr for a constant rate", s.min_lr,
             s.lr);
  TIDE_CHECK(s.warmup_steps >= 0, "warmup_steps = {} must be >= 0", s.warmup_steps);
  TIDE_CHECK(s.max_steps > s.warmup_steps,
             "max_steps = {} must exceed warmup_steps = {} (the cosine decay runs between "
             "them); raise max_steps or lower warmup_steps",
             s.max_steps, s.warmup_steps);
}

float lr_at(int64_t step, const LrSchedule& s) {
  check_lr_schedule(s);
  TIDE_CHECK(step >= 0, "learning-rate schedule asked for step {}; steps count from 0", step);
  const double lr = s.lr, min_lr = s.min_lr;
  if (step < s.warmup_steps)
    return static_cast<float>(lr * static_cast<double>(step + 1) /
                              static_cast<double>(s.warmup_steps));
  if (step > s.max_steps) return s.min_lr;
  const double r = static_cast<double>(step - s.warmup_steps) /
                   static_cast<double>(s.max_steps - s.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * r));
  return static_cast<float>(min_lr + coeff * (lr - min_lr));
}

}  // namespace tide
