#include "tide/estimate/limit_fit.h"

#include <algorithm>
#include <vector>

#include "tide/core/arena.h"
#include "tide/core/error.h"
#include "tide/estimate/memory_estimate.h"
#include "tide/estimate/model_states.h"
#include "tide/estimate/zero_buffers.h"

namespace tide {

int64_t largest_group_chunk_bytes(const TrainSetup& setup, const ChunkLayout& layout) {
  const ModelStateBytes k = bytes_per_parameter(setup.precision, setup.optimizer);
  const int stage = setup.zero_stage;
  // ZeRO-3 on 2+ ranks: F and B read the gathered buffers (non-model), not the owned slices.
  const bool gathered = stage >= 3 && setup.dp() >= 2;
  const auto bytes = [&](int c, bool sliced, int64_t elem_bytes) {
    const int64_t elems = sliced ? layout.slice_elems(c) : layout.chunk_elems(c);
    return static_cast<int64_t>(Arena::aligned(static_cast<size_t>(elems * elem_bytes)));
  };
  int64_t most = 0;
  for (const std::vector<int>& ids : ParamGroups(block_groups(layout)).ids) {
    int64_t param = 0, grad = 0;
    for (int c : layout.chunks_of(ids)) {
      param += bytes(c, stage >= 3, k.param16);
      grad += bytes(c, stage >= 2, k.grads);
    }
    most = std::max({most, gathered ? 0 : param, grad});
  }
  return most;
}

namespace {

// Moves `bytes` of model states from `dev` to `host`, kind by kind in the order auto evicts
// them during forward and backward (Adam's states are used last in the step).
void move_states(MemoryBreakdown& dev, MemoryBreakdown& host, int64_t bytes) {
  for (int64_t MemoryBreakdown::*kind :
       {&MemoryBreakdown::adam_v, &MemoryBreakdown::adam_m, &MemoryBreakdown::master,
        &MemoryBreakdown::chunk_padding, &MemoryBreakdown::grads, &MemoryBreakdown::param16}) {
    const int64_t n = std::min(bytes, dev.*kind);
    dev.*kind -= n;
    host.*kind += n;
    bytes -= n;
  }
  TIDE_ASSERT(bytes == 0);
}

}  // namespace

void fit_device_limit(const TrainSetup& setup, MemoryEstimate& est) {
  LimitFit& f = est.limit;
  f = LimitFit{};
  f.limit = setup.device_memory_limit;
  if (f.limit == 0) return;
  f.auto_placement = setup.placement == Placement::Auto;
  f.device_total = est.device.total();
  f.device_fits = f.device_total <= f.limit;
  if (!f.auto_placement) return;
  // auto runs with one pipeline stage (TrainSetup::validate): the device is that stage's.
  TIDE_ASSERT(est.stages.size() == 1);
  StageEstimate& st = est.stages.front();
  const MemoryBreakdown& d = st.device;
  f.states = d.model_states() + d.chunk_padding;
  f.non_model = d.activations + d.temp_buffers;
  f.largest_group = st.largest_group_chunks;
  f.least_limit = f.non_model + f.largest_group;
  f.auto_fits = f.limit >= f.least_limit;
  f.states_on_device = std::min(f.states, std::max<int64_t>(0, f.limit - f.non_model));
  f.states_on_host = f.states - f.states_on_device;
  f.least_moved = f.states_on_host;
  move_states(st.device, st.host, f.states_on_host);
  est.device = st.device;
  est.host_per_rank = st.host;
  est.host = est.host_per_rank.times(est.ranks_per_host);
}

}  // namespace tide
