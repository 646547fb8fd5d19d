#include "tide/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "tide/core/error.h"

namespace tide {

DynamicLossScaler::DynamicLossScaler(const Fp16LossScale& o) : o_(o) {
  TIDE_CHECK(o.initial_scale_power >= 0 && o.initial_scale_power <= 127,
             "fp16.initial_scale_power = {} must be in [0, 127]; DeepSpeed's default is 16",
             o.initial_scale_power);
  TIDE_CHECK(o.loss_scale_window >= 1,
             "fp16.loss_scale_window = {} must be >= 1 step; DeepSpeed's default is 1000",
             o.loss_scale_window);
  TIDE_CHECK(o.hysteresis >= 1, "fp16.hysteresis = {} must be >= 1; DeepSpeed's default is 2",
             o.hysteresis);
  TIDE_CHECK(std::isfinite(o.min_loss_scale) && o.min_loss_scale > 0,
             "fp16.min_loss_scale = {} must be finite and > 0; DeepSpeed's default is 1",
             o.min_loss_scale);
  s_.scale = std::ldexp(1.0, o.initial_scale_power);
  s_.hysteresis = o.hysteresis;
}

bool DynamicLossScaler::update(bool overflow) {
  if (overflow) {
    if (o_.hysteresis == 1 || s_.hysteresis == 1) {
      TIDE_CHECK(s_.scale != o_.min_loss_scale,
                 "fp16: the gradients overflowed (NaN/Inf) at the minimum loss scale {} "
                 "(fp16.min_loss_scale), so the step cannot be retried at a smaller one; lower "
                 "the learning rate or fp16.min_loss_scale, or train in bf16 (bf16.enabled=true)",
                 s_.scale);
      s_.scale = std::max(s_.scale / 2, o_.min_loss_scale);
    } else {
      s_.hysteresis -= 1;
    }
    s_.last_overflow_iter = s_.iter;
    ++s_.skipped;
  } else {
    if (o_.consecutive_hysteresis) s_.hysteresis = o_.hysteresis;
    const int64_t stable = s_.iter - s_.last_overflow_iter - 1;
    if (stable > 0 && stable % o_.loss_scale_window == 0) {
      if (!o_.consecutive_hysteresis) s_.hysteresis = o_.hysteresis;
      s_.scale *= 2;
    }
  }
  ++s_.iter;
  return !overflow;
}

StaticLossScaler::StaticLossScaler(double scale) {
  TIDE_CHECK(std::isfinite(scale) && scale > 0,
             "static loss scale {} must be finite and > 0 (fp16.loss_scale; 0 = dynamic)", scale);
  s_.scale = scale;
}

bool StaticLossScaler::update(bool overflow) {
  if (overflow) ++s_.skipped;
  ++s_.iter;
  return !overflow;
}

std::unique_ptr<LossScaler> make_loss_scaler(DType compute, const Fp16LossScale& o) {
  if (compute != DType::F16) return std::make_unique<StaticLossScaler>(1.0);
  if (o.loss_scale > 0) return std::make_unique<StaticLossScaler>(o.loss_scale);
  return std::make_unique<DynamicLossScaler>(o);
}

}  // namespace tide
