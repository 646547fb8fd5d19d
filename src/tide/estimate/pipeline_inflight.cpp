#include "tide/estimate/pipeline_inflight.h"

#include <algorithm>
#include <cmath>

#include "tide/core/error.h"

namespace tide {
namespace {

// (micro-batch, model chunk) pairs in flight on a stage of the interleaved schedule.
int64_t interleaved_chunk_microbatches(int p, int stage, int m, int v) {
  const int64_t warmup = 2 * int64_t{p - stage - 1} + int64_t{v - 1} * p;
  return std::min<int64_t>(int64_t{m} * v, warmup + 1);
}

// ZB-V's (micro-batch, chunk) pairs in flight on a stage (each half a stage's M_B).
int64_t zb_v_chunk_microbatches(int p, int stage, int m) {
  return std::min<int64_t>({2 * int64_t{p}, 2 * int64_t{m}, int64_t{m} + stage + 1});
}

// The zero-bubble heuristic's memory limit in whole micro-batches.
int zb_limit(Schedule schedule, int p, double memory_limit) {
  if (schedule == Schedule::ZB1P) return p;
  if (schedule == Schedule::ZB2P) return 2 * p;
  return memory_limit > 0 ? static_cast<int>(std::floor(memory_limit + 1e-9)) : p;
}

}  // namespace

bool inflight_is_bound(Schedule schedule, int p) {
  return p > 1 &&
         (schedule == Schedule::ZBAuto || schedule == Schedule::ZB1P || schedule == Schedule::ZB2P);
}

int input_layer_stage(Schedule, int) {
  return 0;
}

int output_layer_stage(Schedule schedule, int p) {
  return schedule == Schedule::ZBV ? 0 : p - 1;
}

int input_layer_microbatches(Schedule schedule, int p, int m, int v, double memory_limit) {
  if (p > 1 && schedule == Schedule::ZBV) return std::min(m, 2 * p);
  return inflight_microbatches(schedule, p, 0, m, v, memory_limit);
}

int output_layer_microbatches(Schedule schedule, int p, int m, int v, double memory_limit) {
  if (p > 1 && schedule == Schedule::ZBV) return 1;
  return inflight_microbatches(schedule, p, p - 1, m, v, memory_limit);
}

int inflight_microbatches(Schedule schedule, int p, int stage, int m, int v, double memory_limit) {
  TIDE_ASSERT(p >= 1 && stage >= 0 && stage < p && m >= 1 && v >= 1);
  if (p == 1) return 1;
  switch (schedule) {
    case Schedule::GPipe:
      return m;
    case Schedule::OneFOneB:
      return std::min(p - stage, m);
    // Stage i defers W past the later stages' backward: its micro-batches stay until their W,
    // so every stage reaches the first stage's count.
    case Schedule::ZBH1:
      return std::min(p, m);
    case Schedule::ZBH2:
      return std::min(2 * p - 1, m);
    case Schedule::Interleaved:
      return static_cast<int>((interleaved_chunk_microbatches(p, stage, m, v) + v - 1) / v);
    case Schedule::ZBAuto:
    case Schedule::ZB1P:
    case Schedule::ZB2P:
      return std::min(zb_limit(schedule, p, memory_limit), m);
    case Schedule::ZBV:
      return static_cast<int>((zb_v_chunk_microbatches(p, stage, m) + 1) / 2);
  }
  TIDE_ASSERT(false);
}

int64_t inflight_layer_microbatches(Schedule schedule, int p, int stage, int m, int v,
                                    int layers_per_stage, double memory_limit) {
  if (p > 1 && schedule == Schedule::Interleaved) {
    TIDE_ASSERT(layers_per_stage % v == 0);
    return interleaved_chunk_microbatches(p, stage, m, v) * (layers_per_stage / v);
  }
  if (p > 1 && schedule == Schedule::ZBV) {
    TIDE_ASSERT(layers_per_stage % 2 == 0);
    return zb_v_chunk_microbatches(p, stage, m) * (layers_per_stage / 2);
  }
  return int64_t{inflight_microbatches(schedule, p, stage, m, v, memory_limit)} * layers_per_stage;
}

}  // namespace tide
