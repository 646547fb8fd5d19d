#include "tide/estimate/memory_estimate.h"

#include <algorithm>

#include "tide/core/error.h"
#include "tide/estimate/activation_memory.h"
#include "tide/estimate/pipeline_inflight.h"
#include "tide/estimate/zero_buffers.h"
#include "tide/model/layout.h"

namespace tide {

MemoryBreakdown MemoryBreakdown::times(int64_t n) const {
  MemoryBreakdown r = *this;
  for (int64_t* x : {&r.param16, &r.grads, &r.master, &r.adam_m, &r.adam_v, &r.activations,
                     &r.temp_buffers, &r.chunk_padding})
    *x *= n;
  return r;
}

namespace {

// Model states of one rank of a stage, split between device and host by the placement. Each
// kind costs what the chunk store allocates for it (chunked_model_states); the categories
// param16 ... adam_v hold the rank's share of the parameters (ZeRO's Psi or ceil(Psi / Nd)
// elements) and chunk_padding the rest: the alignment padding of each chunk.
void place_model_states(const TrainSetup& setup, const ChunkLayout& layout, StageEstimate& st) {
  const int dp = setup.dp(), stage = setup.zero_stage;
  const int64_t psi = layout.num_params();
  const ModelStateBytes share = zero_model_states(psi, stage, dp, setup.precision, setup.optimizer);
  const ModelStateBytes kept =
      chunked_model_states(layout, stage, setup.precision, setup.optimizer);
  const int64_t pad_param = kept.param16 - share.param16;
  const int64_t pad_grad = kept.grads - share.grads;
  const int64_t pad_opt = kept.optimizer_bytes() - share.optimizer_bytes();
  TIDE_ASSERT(pad_param >= 0 && pad_grad >= 0 && pad_opt >= 0);

  MemoryBreakdown& dev = st.device;
  MemoryBreakdown& host = st.host;
  const bool offload_opt = setup.offload != Offload::None;
  const bool offload_params = setup.offload == Offload::All;

  MemoryBreakdown& opt_home = offload_opt ? host : dev;
  opt_home.master += share.master;
  opt_home.adam_m += share.adam_m;
  opt_home.adam_v += share.adam_v;
  opt_home.chunk_padding += pad_opt;

  MemoryBreakdown& param_home = offload_params ? host : dev;
  param_home.param16 += share.param16;
  param_home.chunk_padding += pad_param;

  if (!offload_opt || stage >= 2) {
    // Stage >= 2 with offload streams the grad slice to the host during backward.
    MemoryBreakdown& grad_home = offload_opt ? host : dev;
    grad_home.grads += share.grads;
    grad_home.chunk_padding += pad_grad;
  } else {
    // Stage 1 with offload: the full grads stay on the device (ZeRO-1 keeps them), and the
    // reduced slice this rank owns is copied to the host for the CPU Adam.
    dev.grads += share.grads;
    dev.chunk_padding += pad_grad;
    const int64_t part = zero_model_states(psi, 2, dp, setup.precision, setup.optimizer).grads;
    host.grads += part;
    host.chunk_padding +=
        chunked_model_states(layout, 2, setup.precision, setup.optimizer).grads - part;
  }
}

// ZeRO's communication buffers: what the runtime allocates (train/zero.cpp), whole chunks in
// the compute dtype from a best-fit pool (replayed by simulate_zero_buffers over the step's
// block accesses; stage 1 reduces in place and needs none). Buckets the runtime would reject as
// smaller than a chunk or a block are taken at the least it accepts. Offload moves the rank's
// slices, not the buffers: the same whole chunks are gathered and reduced on the GPU.
int64_t chunk_buffers(const TrainSetup& setup, const ChunkLayout& layout, StageEstimate& st) {
  if (setup.zero_stage < 2) return 0;
  const std::vector<ModelBlock> blocks = model_blocks(layout);
  const ZeroSettings s = runnable_zero_settings(setup.zero, layout, blocks);
  st.comm_buffers = simulate_zero_buffers(layout, blocks, setup.zero_stage, s, setup.grad_accum,
                                          bytes_per_param(setup.precision));
  return st.comm_buffers.bytes;
}

ActivationShape activation_shape(const TrainSetup& setup) {
  ActivationShape x;
  x.s = setup.seq();
  x.b = setup.micro_batch;
  x.h = setup.model.n_embd;
  x.a = setup.model.n_head;
  x.v = setup.model.vocab_size;
  x.t = setup.tp;
  x.sp = setup.sp && setup.tp > 1;
  x.elem_bytes = bytes_per_param(setup.precision);
  x.partition = setup.partition_activations && setup.tp > 1 && !x.sp;
  x.cpu_checkpointing = x.partition && setup.cpu_checkpointing;
  return x;
}

}  // namespace

MemoryEstimate estimate_memory(const TrainSetup& setup) {
  setup.validate();
  const int p = setup.pp;
  const int v = setup.schedule == Schedule::Interleaved && p > 1 ? setup.virtual_stages : 1;
  const int layers = setup.model.n_layer / p;
  const ActivationShape shape = activation_shape(setup);
  MemoryEstimate est;
  est.ranks_per_host = setup.ranks_per_host();
  for (int s = 0; s < p; ++s) {
    StageEstimate st;
    st.stage = s;
    st.layers = layers;
    // The tensors of a rank of this stage and their chunks, exactly as the runtime's chunk store
    // lays them out (every tp rank of a stage holds the same sizes; tp rank 0 stands for all).
    ChunkLayout layout = make_layout(setup.model, {setup.tp, 0, p, s});
    layout.pack(setup.chunk_target_elems(), setup.dp());
    st.chunks = chunk_plan(layout);
    st.params = layout.num_params();
    place_model_states(setup, layout, st);

    st.inflight_microbatches = inflight_microbatches(setup.schedule, p, s, setup.grad_accum, v);
    st.inflight_layer_microbatches =
        inflight_layer_microbatches(setup.schedule, p, s, setup.grad_accum, v, layers);
    int64_t act = layer_activation_bytes(shape, setup.recompute) * st.inflight_layer_microbatches;
    if (s == 0) act += input_layer_activation_bytes(shape) * st.inflight_microbatches;
    if (s == p - 1) act += output_layer_activation_bytes(shape) * st.inflight_microbatches;
    act += partition_buffer_bytes(shape, setup.recompute) * st.inflight_microbatches;  // P_a
    st.device.activations = act;
    st.host.activations =
        host_checkpoint_bytes(shape, setup.recompute) * st.inflight_layer_microbatches;
    st.device.temp_buffers =
        chunk_buffers(setup, layout, st) + recompute_workspace_bytes(shape, setup.recompute);
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
