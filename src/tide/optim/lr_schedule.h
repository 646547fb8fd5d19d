#pragma once
// Learning-rate schedules of DeepSpeed (deepspeed/runtime/lr_schedules.py: WarmupLR,
// WarmupDecayLR, WarmupCosineLR), formula for formula and default for default, so that a
// DeepSpeed config's `scheduler` section means in tide what it means in DeepSpeed; plus
// CONSTANT, DeepSpeed's run without a scheduler (the optimizer's lr throughout).
//
// DeepSpeed builds the scheduler before the first step (last_batch_iteration = -1, which sets
// the lr of step 0) and calls scheduler.step() after every optimizer step. So the optimizer
// step with 0-based index k runs with the scheduler at iteration i = k - 1:
//
//   i < 0 (step 0):   WarmupLR/WarmupDecayLR: warmup_min_lr;  WarmupCosineLR: 0
//   W = max(2, warmup_num_steps), T = total_num_steps
//   warmup, i < W:    g = log(i + 1) / log(W) (log)  or  i / W (linear)
//     WarmupLR, WarmupDecayLR:  warmup_min_lr + (warmup_max_lr - warmup_min_lr) * g
//     WarmupCosineLR:           lr * (warmup_min_ratio + g * (1 - warmup_min_ratio))
//   after warmup:
//     WarmupLR:        warmup_max_lr
//     WarmupDecayLR:   warmup_min_lr + (warmup_max_lr - warmup_min_lr) *
//                      max(0, (T - i) / max(1, T - W))
//     WarmupCosineLR:  lr * max(0, c + (1 - c) * (1 + cos(pi * p)) / 2),
//                      p = min(1, (i - W + 1) / max(1, T - W)), c = cos_min_ratio
//
// With log warmup the first two steps run at the warmup's start (log(1) = 0): lr 0 by
// default. The schedule is a pure function of the step, so a resumed run needs no state.

#include <cstdint>
#include <string>

namespace tide {

enum class LrScheduleType { CONSTANT, WARMUP_LR, WARMUP_DECAY_LR, WARMUP_COSINE_LR };
enum class WarmupType { LOG, LINEAR };

// DeepSpeed's names: "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"; "none" for CONSTANT.
LrScheduleType parse_lr_schedule_type(const std::string& name);
const char* lr_schedule_type_name(LrScheduleType t);
WarmupType parse_warmup_type(const std::string& name);  // "log" or "linear"
const char* warmup_type_name(WarmupType t);

// Defaults are DeepSpeed's.
struct LrSchedule {
  LrScheduleType type = LrScheduleType::WARMUP_COSINE_LR;
  double lr = 1e-3;                 // optimizer lr: CONSTANT's rate, what WarmupCosineLR scales
  double warmup_min_lr = 0.0;       // WarmupLR, WarmupDecayLR
  double warmup_max_lr = 1e-3;      // WarmupLR, WarmupDecayLR: the peak
  int64_t warmup_num_steps = 1000;  // >= 1 (DeepSpeed uses at least 2)
  WarmupType warmup_type = WarmupType::LOG;
  int64_t total_num_steps = 1;    // WarmupDecayLR, WarmupCosineLR
  double cos_min_ratio = 1e-4;    // WarmupCosineLR: the floor, a fraction of lr
  double warmup_min_ratio = 0.0;  // WarmupCosineLR: the warmup's start, a fraction of lr

  bool operator==(const LrSchedule&) const = default;
};

// Throws a tide::Error naming the parameter when a value is not finite, a rate or ratio is
// negative (a ratio above 1), warmup_num_steps < 1 (DeepSpeed's ValueError too) or
// total_num_steps < 1.
void check_lr_schedule(const LrSchedule& s);

// The learning rate of the optimizer step with 0-based index `step` (the step about to be
// taken), in double as DeepSpeed computes it in Python.
double lr_at(int64_t step, const LrSchedule& s);

}  // namespace tide
