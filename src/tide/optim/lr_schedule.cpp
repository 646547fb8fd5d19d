#include "tide/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tide/core/error.h"

namespace tide {

LrScheduleType parse_lr_schedule_type(const std::string& name) {
  if (name == "WarmupLR") return LrScheduleType::WARMUP_LR;
  if (name == "WarmupDecayLR") return LrScheduleType::WARMUP_DECAY_LR;
  if (name == "WarmupCosineLR") return LrScheduleType::WARMUP_COSINE_LR;
  if (name == "none") return LrScheduleType::CONSTANT;
  TIDE_FAIL(
      "scheduler.type '{}' is not supported; use WarmupCosineLR, WarmupDecayLR, WarmupLR or "
      "none (constant optimizer.params.lr)",
      name);
}

const char* lr_schedule_type_name(LrScheduleType t) {
  switch (t) {
    case LrScheduleType::CONSTANT:
      return "none";
    case LrScheduleType::WARMUP_LR:
      return "WarmupLR";
    case LrScheduleType::WARMUP_DECAY_LR:
      return "WarmupDecayLR";
    case LrScheduleType::WARMUP_COSINE_LR:
      return "WarmupCosineLR";
  }
  return "?";
}

WarmupType parse_warmup_type(const std::string& name) {
  if (name == "log") return WarmupType::LOG;
  if (name == "linear") return WarmupType::LINEAR;
  TIDE_FAIL("scheduler.params.warmup_type '{}' is not supported; use log or linear", name);
}

const char* warmup_type_name(WarmupType t) {
  return t == WarmupType::LOG ? "log" : "linear";
}

void check_lr_schedule(const LrSchedule& s) {
  auto rate = [](const char* name, double x) {
    TIDE_CHECK(std::isfinite(x) && x >= 0, "{} = {} must be finite and >= 0", name, x);
  };
  auto ratio = [](const char* name, double x) {
    TIDE_CHECK(x >= 0 && x <= 1, "{} = {} must lie in [0, 1]", name, x);
  };
  rate("learning rate", s.lr);
  rate("scheduler.params.warmup_min_lr", s.warmup_min_lr);
  rate("scheduler.params.warmup_max_lr", s.warmup_max_lr);
  ratio("scheduler.params.cos_min_ratio", s.cos_min_ratio);
  ratio("scheduler.params.warmup_min_ratio", s.warmup_min_ratio);
  TIDE_CHECK(s.warmup_num_steps >= 1,
             "scheduler.params.warmup_num_steps = {} must be a positive integer (as in DeepSpeed)",
             s.warmup_num_steps);
  TIDE_CHECK(s.total_num_steps >= 1, "scheduler.params.total_num_steps = {} must be >= 1",
             s.total_num_steps);
}

namespace {

// The warmup's progress in [0, 1) at iteration i < W, as DeepSpeed computes it.
double warmup_gamma(int64_t i, int64_t W, WarmupType type) {
  if (type == WarmupType::LOG) {
    const double inverse_log_warm_up = 1.0 / std::log(static_cast<double>(W));
    return inverse_log_warm_up * std::log(static_cast<double>(i + 1));
  }
  return static_cast<double>(i) / static_cast<double>(W);
}

}  // namespace

double lr_at(int64_t step, const LrSchedule& s) {
  check_lr_schedule(s);
  TIDE_CHECK(step >= 0, "learning-rate schedule asked for step {}; steps count from 0", step);
  if (s.type == LrScheduleType::CONSTANT) return s.lr;
  const int64_t i = step - 1;  // DeepSpeed's last_batch_iteration when this step runs
  const int64_t W = std::max<int64_t>(2, s.warmup_num_steps);
  const int64_t T = s.total_num_steps;
  if (s.type == LrScheduleType::WARMUP_COSINE_LR) {
    if (i < 0) return 0.0;  // DeepSpeed's get_lr before its first step()
    double ratio;
    if (i < W) {
      ratio = warmup_gamma(i, W, s.warmup_type);
      ratio = s.warmup_min_ratio + ratio * (1.0 - s.warmup_min_ratio);
    } else {
      const double real_last_step = static_cast<double>(i - W + 1);
      const double real_total_steps = static_cast<double>(std::max<int64_t>(1, T - W));
      const double progress = std::min(1.0, real_last_step / real_total_steps);
      ratio = (1 + std::cos(std::numbers::pi * progress)) / 2;
      ratio = std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * ratio);
    }
    return s.lr * ratio;
  }
  // WarmupLR and WarmupDecayLR: min + delta * gamma.
  if (i < 0) return s.warmup_min_lr;
  const double delta = s.warmup_max_lr - s.warmup_min_lr;
  double gamma = 1.0;
  if (i < W) {
    gamma = warmup_gamma(i, W, s.warmup_type);
  } else if (s.type == LrScheduleType::WARMUP_DECAY_LR) {
    gamma = std::max(0.0, static_cast<double>(T - i) / std::max(1.0, static_cast<double>(T - W)));
  }
  return s.warmup_min_lr + delta * gamma;
}

}  // namespace tide
