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
  const int stage = setup.zero_stage;
  const ModelStateBytes k =
      bytes_per_parameter(setup.precision, setup.optimizer, grad_precision_of(setup, stage));
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

// The model states' kinds, in the order auto evicts them during forward and backward (Adam's
// states are used last in the step).
constexpr int64_t MemoryBreakdown::*kStateKinds[] = {
    &MemoryBreakdown::adam_v,        &MemoryBreakdown::adam_m, &MemoryBreakdown::master,
    &MemoryBreakdown::chunk_padding, &MemoryBreakdown::grads,  &MemoryBreakdown::param16};

// Moves `bytes` of model states from `dev` to `host`, kind by kind in eviction order.
void move_states(MemoryBreakdown& dev, MemoryBreakdown& host, int64_t bytes) {
  for (int64_t MemoryBreakdown::*kind : kStateKinds) {
    const int64_t n = std::min(bytes, dev.*kind);
    dev.*kind -= n;
    host.*kind += n;
    bytes -= n;
  }
  TIDE_ASSERT(bytes == 0);
}

// With a page-locked host tier the host keeps memory for every chunk that has been there (a move
// to the device leaves its host memory cached for its return: AutoPlacement), counted as every
// state: the upper figure.
void keep_on_host(const MemoryBreakdown& dev, MemoryBreakdown& host) {
  for (int64_t MemoryBreakdown::*kind : kStateKinds) host.*kind += dev.*kind;
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
  // Each pipeline stage's rank places its own store within the same limit; the figures shown
  // are those of the stage that needs the largest limit (the one that decides whether the run
  // fits), and the device and host totals the largest over the stages after the move.
  LimitFit binding;
  for (StageEstimate& st : est.stages) {
    LimitFit s = f;
    const MemoryBreakdown& d = st.device;
    s.states = d.model_states() + d.chunk_padding;
    s.non_model = d.activations + d.temp_buffers + d.arenas;
    s.largest_group = st.largest_group_chunks;
    s.least_limit = s.non_model + s.largest_group;
    s.auto_fits = s.limit >= s.least_limit;
    s.states_on_device = std::min(s.states, std::max<int64_t>(0, s.limit - s.non_model));
    s.states_on_host = s.states - s.states_on_device;
    s.least_moved = s.states_on_host;
    move_states(st.device, st.host, s.states_on_host);
    if (setup.pinned_host_tier) keep_on_host(st.device, st.host);
    if (st.stage == 0 || s.least_limit > binding.least_limit) binding = s;
  }
  binding.device_total = f.device_total;
  binding.device_fits = f.device_fits;
  f = binding;
  est.peak_stage = 0;
  est.host_per_rank = MemoryBreakdown{};
  for (const StageEstimate& st : est.stages) {
    if (st.device.total() > est.stages[est.peak_stage].device.total()) est.peak_stage = st.stage;
    if (st.host.total() > est.host_per_rank.total()) est.host_per_rank = st.host;
  }
  est.device = est.stages[est.peak_stage].device;
  est.host = est.host_per_rank.times(est.ranks_per_host);
}

}  // namespace tide
