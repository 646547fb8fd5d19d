#pragma once
// Learning-rate schedule of nanoGPT / llm.c (get_lr): linear warmup from 0, then cosine
// decay to min_lr, then constant.
//
//   step < warmup_steps:          lr * (step + 1) / warmup_steps
//   warmup <= step <= max_steps:  min_lr + 0.5 * (1 + cos(pi * r)) * (lr - min_lr),
//                                 r = (step - warmup_steps) / (max_steps - warmup_steps)
//   step > max_steps:             min_lr
//
// step is 0-based (the step about to be taken). For a constant LR set min_lr = lr.

#include <cstdint>

namespace tide {

struct LrSchedule {
  float lr = 6e-4f;          // peak learning rate, reached at the end of warmup
  float min_lr = 0.0f;       // floor of the cosine decay
  int64_t warmup_steps = 0;  // 0: start at lr directly
  int64_t max_steps = 1;     // the step at which the decay reaches min_lr
};

// Throws a tide::Error if lr < 0, min_lr outside [0, lr], warmup_steps < 0, or
// max_steps <= warmup_steps.
void check_lr_schedule(const LrSchedule& s);

float lr_at(int64_t step, const LrSchedule& s);

}  // namespace tide
