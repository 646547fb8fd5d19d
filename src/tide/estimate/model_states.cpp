#include "tide/estimate/model_states.h"

#include "tide/core/arena.h"
#include "tide/core/error.h"

namespace tide {

ModelStateBytes bytes_per_parameter(Precision precision, Optimizer optimizer,
                                    std::optional<Precision> grads) {
  ModelStateBytes k;
  k.param16 = bytes_per_param(precision);
  k.grads = bytes_per_param(grads.value_or(precision));
  // Mixed precision keeps an fp32 master copy for the update; fp32 updates param16 itself.
  k.master = precision == Precision::FP32 ? 0 : 4;
  const int64_t state_bytes = optimizer == Optimizer::AdamW ? 4 : 0;  // fp32 m and v
  k.adam_m = state_bytes;
  k.adam_v = state_bytes;
  return k;
}

ModelStateBytes zero_model_states(int64_t psi, int zero_stage, int dp, Precision precision,
                                  Optimizer optimizer, std::optional<Precision> grads) {
  TIDE_ASSERT(psi >= 0 && dp >= 1 && zero_stage >= 0 && zero_stage <= 3);
  const ModelStateBytes k = bytes_per_parameter(precision, optimizer, grads);
  const int64_t part = (psi + dp - 1) / dp;  // one rank's partition
  // Stage 1 partitions the optimizer states, stage 2 also the grads, stage 3 also the params.
  const int64_t opt_elems = zero_stage >= 1 ? part : psi;
  const int64_t grad_elems = zero_stage >= 2 ? part : psi;
  const int64_t param_elems = zero_stage >= 3 ? part : psi;
  ModelStateBytes r;
  r.param16 = param_elems * k.param16;
  r.grads = grad_elems * k.grads;
  r.master = opt_elems * k.master;
  r.adam_m = opt_elems * k.adam_m;
  r.adam_v = opt_elems * k.adam_v;
  return r;
}

ChunkPlan chunk_plan(const ChunkLayout& layout) {
  TIDE_ASSERT(layout.packed());
  ChunkPlan p;
  p.target_elems = layout.target_elems();
  p.chunks = layout.num_chunks();
  p.largest_chunk_elems = layout.max_chunk_elems();
  p.total_elems = layout.total_elems();
  for (int c = 0; c < layout.num_chunks(); ++c) p.owned_elems += layout.slice_elems(c);
  p.payload_elems = layout.num_params();
  return p;
}

namespace {

// Bytes of one kind: every chunk whole, or this rank's slice of each, each allocation rounded
// as the chunk store rounds it (Arena::aligned).
int64_t kind_bytes(const ChunkLayout& layout, bool sliced, int64_t elem_bytes) {
  if (elem_bytes == 0) return 0;
  int64_t bytes = 0;
  for (int c = 0; c < layout.num_chunks(); ++c) {
    const int64_t elems = sliced ? layout.slice_elems(c) : layout.chunk_elems(c);
    bytes += static_cast<int64_t>(Arena::aligned(static_cast<size_t>(elems * elem_bytes)));
  }
  return bytes;
}

}  // namespace

ModelStateBytes chunked_model_states(const ChunkLayout& layout, int zero_stage, Precision precision,
                                     Optimizer optimizer, std::optional<Precision> grads) {
  TIDE_ASSERT(layout.packed() && zero_stage >= 0 && zero_stage <= 3);
  const ModelStateBytes k = bytes_per_parameter(precision, optimizer, grads);
  // Stage 1 slices the optimizer states, stage 2 also the grads, stage 3 also the params.
  ModelStateBytes r;
  r.param16 = kind_bytes(layout, zero_stage >= 3, k.param16);
  r.grads = kind_bytes(layout, zero_stage >= 2, k.grads);
  r.master = kind_bytes(layout, zero_stage >= 1, k.master);
  r.adam_m = kind_bytes(layout, zero_stage >= 1, k.adam_m);
  r.adam_v = kind_bytes(layout, zero_stage >= 1, k.adam_v);
  return r;
}

}  // namespace tide
