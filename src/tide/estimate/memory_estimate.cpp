#include "tide/estimate/memory_estimate.h"

#include <algorithm>

#include "tide/core/error.h"
#include "tide/estimate/activation_memory.h"
#include "tide/estimate/pipeline_inflight.h"

namespace tide {

MemoryBreakdown MemoryBreakdown::times(int64_t n) const {
  MemoryBreakdown r = *this;
  for (int64_t* x : {&r.param16, &r.grads, &r.master, &r.adam_m, &r.adam_v, &r.activations,
                     &r.temp_buffers, &r.chunk_padding})
    *x *= n;
  return r;
}

namespace {

// Elements of one kind of model state that a rank keeps, in whole chunks.
int64_t chunk_elems_kept(const ChunkPlan& plan, bool partitioned, int dp) {
  return (partitioned ? plan.owned_chunks(dp) : plan.chunks) * plan.chunk_elems;
}

// Model states of one rank of a stage, split between device and host by the placement.
void place_model_states(const TrainSetup& setup, const ChunkPlan& plan, StageEstimate& st) {
  const int dp = setup.dp(), stage = setup.zero_stage;
  const ModelStateBytes k = bytes_per_parameter(setup.precision, setup.optimizer);
  const ModelStateBytes payload =
      zero_model_states(plan.payload_elems, stage, dp, setup.precision, setup.optimizer);
  // Padding of one kind = bytes of the chunks kept minus the payload in them.
  auto padding = [&](bool partitioned, int64_t bytes_per_elem, int64_t payload_bytes) {
    return chunk_elems_kept(plan, partitioned, dp) * bytes_per_elem - payload_bytes;
  };
  const int64_t pad_param = padding(stage >= 3, k.param16, payload.param16);
  const int64_t pad_grad = padding(stage >= 2, k.grads, payload.grads);
  const int64_t pad_opt = padding(stage >= 1, k.master, payload.master) +
                          padding(stage >= 1, k.adam_m, payload.adam_m) +
                          padding(stage >= 1, k.adam_v, payload.adam_v);

  MemoryBreakdown& dev = st.device;
  MemoryBreakdown& host = st.host;
  const bool offload_opt = setup.offload != Offload::None;
  const bool offload_params = setup.offload == Offload::All;

  MemoryBreakdown& opt_home = offload_opt ? host : dev;
  opt_home.master += payload.master;
  opt_home.adam_m += payload.adam_m;
  opt_home.adam_v += payload.adam_v;
  opt_home.chunk_padding += pad_opt;

  MemoryBreakdown& param_home = offload_params ? host : dev;
  param_home.param16 += payload.param16;
  param_home.chunk_padding += pad_param;

  if (!offload_opt || stage >= 2) {
    // Stage >= 2 with offload streams the grad partition to the host during backward.
    MemoryBreakdown& grad_home = offload_opt ? host : dev;
    grad_home.grads += payload.grads;
    grad_home.chunk_padding += pad_grad;
  } else {
    // Stage 1 with offload: the full grads stay on the device (ZeRO-1 keeps them), and the
    // reduced partition this rank owns is copied to the host for the CPU Adam.
    dev.grads += payload.grads;
    dev.chunk_padding += pad_grad;
    const ModelStateBytes part =
        zero_model_states(plan.payload_elems, 2, dp, setup.precision, setup.optimizer);
    host.grads += part.grads;
    host.chunk_padding += padding(true, k.grads, part.grads);
  }
}

// Constant-size buffers for chunk communication: two chunk groups of Nd chunks in flight (the
// one being reduced or gathered and the one prefetched), counting only chunks not already kept
// and only chunks that hold tensors (the padding chunks added to fill the last group carry
// nothing to reduce or gather). Nothing is added at stages 0/1, whose grads are all-reduced or
// reduce-scattered in place. Note what this means for small models on many ranks: when the
// model has fewer than 2 Nd chunks, a rank materialises every chunk at its peak.
int64_t chunk_buffers(const TrainSetup& setup, const ChunkPlan& plan) {
  const int dp = setup.dp();
  const int64_t bytes = bytes_per_param(setup.precision);
  const int64_t in_flight = 2 * int64_t{dp};  // two groups
  // Real chunks a rank does not own (the least-loaded owner is the worst case).
  const int64_t not_owned = plan.chunks - plan.chunks / dp;
  const int64_t not_owned_in_flight = std::min(in_flight - 2, not_owned);  // 2 of 2Nd are owned
  const int64_t all_in_flight = std::min(in_flight, plan.chunks);
  int64_t chunks = 0;
  // Grads of non-owned chunks live until their reduce-scatter; under offload the owned ones
  // are also only passing through on their way to the host.
  if (setup.zero_stage >= 2)
    chunks += setup.offload == Offload::None ? not_owned_in_flight : all_in_flight;
  // Params of non-owned chunks are all-gathered before use; under offload_all the owned ones
  // are fetched from the host as well.
  if (setup.zero_stage >= 3)
    chunks += setup.offload == Offload::All ? all_in_flight : not_owned_in_flight;
  return chunks * plan.chunk_elems * bytes;
}

ActivationShape activation_shape(const TrainSetup& setup) {
  ActivationShape x;
  x.s = setup.model.max_seq_len;
  x.b = setup.micro_batch;
  x.h = setup.model.n_embd;
  x.a = setup.model.n_head;
  x.v = setup.model.vocab_size;
  x.t = setup.tp;
  x.sp = setup.sp && setup.tp > 1;
  x.elem_bytes = bytes_per_param(setup.precision);
  return x;
}

}  // namespace

MemoryEstimate estimate_memory(const TrainSetup& setup) {
  setup.validate();
  const int p = setup.pp;
  const int v = setup.schedule == Schedule::Interleaved && p > 1 ? setup.virtual_stages : 1;
  const int layers = setup.model.n_layer / p;
  const int elem_bytes = bytes_per_param(setup.precision);

  std::vector<std::vector<ParamTensor>> tensors(p);
  int64_t chunk_elems = setup.chunk_mib * (int64_t{1} << 20) / elem_bytes;
  int64_t largest = 0;
  for (int s = 0; s < p; ++s) {
    tensors[s] = stage_param_tensors(setup.model, setup.tp, p, s);
    for (const ParamTensor& x : tensors[s]) largest = std::max(largest, x.elems);
  }
  if (chunk_elems == 0) chunk_elems = largest;  // automatic: one chunk size for all stages

  const ActivationShape shape = activation_shape(setup);
  MemoryEstimate est;
  est.ranks_per_host = setup.ranks_per_host();
  for (int s = 0; s < p; ++s) {
    StageEstimate st;
    st.stage = s;
    st.layers = layers;
    st.chunks = plan_chunks(tensors[s], chunk_elems, setup.dp(), elem_bytes);
    st.params = st.chunks.payload_elems;
    place_model_states(setup, st.chunks, st);

    st.inflight_microbatches = inflight_microbatches(setup.schedule, p, s, setup.grad_accum, v);
    st.inflight_layer_microbatches =
        inflight_layer_microbatches(setup.schedule, p, s, setup.grad_accum, v, layers);
    int64_t act = layer_activation_bytes(shape, setup.recompute) * st.inflight_layer_microbatches;
    if (s == 0) act += input_layer_activation_bytes(shape) * st.inflight_microbatches;
    if (s == p - 1) act += output_layer_activation_bytes(shape) * st.inflight_microbatches;
    st.device.activations = act;
    st.device.temp_buffers =
        chunk_buffers(setup, st.chunks) + recompute_workspace_bytes(shape, setup.recompute);
    est.stages.push_back(st);
  }
  for (const StageEstimate& st : est.stages) {
    if (st.device.total() > est.stages[est.peak_stage].device.total()) est.peak_stage = st.stage;
    if (st.host.total() > est.host_per_rank.total()) est.host_per_rank = st.host;
  }
  est.device = est.stages[est.peak_stage].device;
  est.host = est.host_per_rank.times(est.ranks_per_host);
  return est;
}

}  // namespace tide
