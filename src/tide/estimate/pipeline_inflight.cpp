#include "tide/estimate/pipeline_inflight.h"

#include <algorithm>

#include "tide/core/error.h"

namespace tide {
namespace {

// (micro-batch, model chunk) pairs in flight on a stage of the interleaved schedule.
int64_t interleaved_chunk_microbatches(int p, int stage, int m, int v) {
  const int64_t warmup = 2 * int64_t{p - stage - 1} + int64_t{v - 1} * p;
  return std::min<int64_t>(int64_t{m} * v, warmup + 1);
}

}  // namespace

int inflight_microbatches(Schedule schedule, int p, int stage, int m, int v) {
  TIDE_ASSERT(p >= 1 && stage >= 0 && stage < p && m >= 1 && v >= 1);
  if (p == 1) return 1;
  switch (schedule) {
    case Schedule::GPipe:
      return m;
    case Schedule::OneFOneB:
    case Schedule::ZBH1:
      return std::min(p - stage, m);
    case Schedule::ZBH2:
      return std::min(2 * (p - stage) - 1, m);
    case Schedule::Interleaved:
      return static_cast<int>((interleaved_chunk_microbatches(p, stage, m, v) + v - 1) / v);
  }
  TIDE_ASSERT(false);
}

int64_t inflight_layer_microbatches(Schedule schedule, int p, int stage, int m, int v,
                                    int layers_per_stage) {
  if (p > 1 && schedule == Schedule::Interleaved) {
    TIDE_ASSERT(layers_per_stage % v == 0);
    return interleaved_chunk_microbatches(p, stage, m, v) * (layers_per_stage / v);
  }
  return int64_t{inflight_microbatches(schedule, p, stage, m, v)} * layers_per_stage;
}

}  // namespace tide
