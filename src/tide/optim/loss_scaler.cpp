#include "tide/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "tide/core/error.h"

namespace tide {

DynamicLossScaler::DynamicLossScaler(const DynamicLossScalerOptions& o)
    : o_(o), scale_(o.init_scale) {
  TIDE_CHECK(std::isfinite(o.min_scale) && o.min_scale > 0.0f,
             "loss scaler min_scale = {} must be finite and > 0; use e.g. 1", o.min_scale);
  TIDE_CHECK(std::isfinite(o.max_scale) && o.max_scale >= o.min_scale,
             "loss scaler max_scale = {} must be finite and >= min_scale ({})", o.max_scale,
             o.min_scale);
  TIDE_CHECK(
      std::isfinite(o.init_scale) && o.init_scale >= o.min_scale && o.init_scale <= o.max_scale,
      "loss scaler init_scale = {} must lie in [min_scale, max_scale] = [{}, {}]; the "
      "usual fp16 start is 65536",
      o.init_scale, o.min_scale, o.max_scale);
  TIDE_CHECK(o.backoff_factor > 0.0f && o.backoff_factor < 1.0f,
             "loss scaler backoff_factor = {} must be in (0, 1); use 0.5", o.backoff_factor);
  TIDE_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1.0f,
             "loss scaler growth_factor = {} must be > 1; use 2", o.growth_factor);
  TIDE_CHECK(o.growth_interval >= 1,
             "loss scaler growth_interval = {} must be >= 1 step; use e.g. 1000",
             o.growth_interval);
}

bool DynamicLossScaler::update(bool found_nonfinite) {
  if (found_nonfinite) {
    scale_ = std::max(scale_ * o_.backoff_factor, o_.min_scale);
    good_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++good_steps_ == o_.growth_interval) {
    scale_ = std::min(scale_ * o_.growth_factor, o_.max_scale);
    good_steps_ = 0;
  }
  return true;
}

StaticLossScaler::StaticLossScaler(float scale) : scale_(scale) {
  TIDE_CHECK(std::isfinite(scale) && scale > 0.0f,
             "static loss scale {} must be finite and > 0; use 1 for bf16/f32", scale);
}

bool StaticLossScaler::update(bool found_nonfinite) {
  if (found_nonfinite) ++skipped_;
  return !found_nonfinite;
}

std::unique_ptr<LossScaler> make_loss_scaler(DType compute, const DynamicLossScalerOptions& o) {
  if (compute == DType::F16) return std::make_unique<DynamicLossScaler>(o);
  return std::make_unique<StaticLossScaler>(1.0f);
}

}  // namespace tide
