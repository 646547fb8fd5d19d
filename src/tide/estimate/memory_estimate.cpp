#include "tide/estimate/memory_estimate.h"

#include <algorithm>
#include <optional>

#include "tide/core/arena.h"
#include "tide/core/error.h"
#include "tide/estimate/activation_memory.h"
#include "tide/estimate/pipeline_inflight.h"
#include "tide/estimate/zero_buffers.h"
#include "tide/model/arena_bytes.h"
#include "tide/model/layout.h"
#include "tide/optim/grad_norm_cuda.h"
#include "tide/pipeline/generators.h"
#include "tide/pipeline/stage_peaks.h"

namespace tide {

MemoryBreakdown MemoryBreakdown::times(int64_t n) const {
  MemoryBreakdown r = *this;
  for (int64_t* x : {&r.param16, &r.grads, &r.master, &r.adam_m, &r.adam_v, &r.activations,
                     &r.temp_buffers, &r.chunk_padding, &r.arenas})
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
  const Precision grads = grad_precision_of(setup, stage);
  const ModelStateBytes share =
      zero_model_states(psi, stage, dp, setup.precision, setup.optimizer, grads);
  const ModelStateBytes kept =
      chunked_model_states(layout, stage, setup.precision, setup.optimizer, grads);
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

  // The gradients stay where ZeRO keeps them (whole chunks at stages 0-1, the owned slice at
  // 2-3), on the compute tier.
  dev.grads += share.grads;
  dev.chunk_padding += pad_grad;
  if (!offload_opt) return;
  // ZeRO-Offload (OffloadPolicy): the owned slice goes down into an f32 host buffer, what the
  // CPU Adam reads (DeepSpeed's CPU Adam reads f32 gradients too), and the master has chunks of
  // its own on the host even in f32 training (StoreOptions::separate_master), 4 bytes per owned
  // element as in mixed precision.
  const ModelStateBytes f32_slice =
      zero_model_states(psi, 2, dp, Precision::BF16, setup.optimizer, Precision::FP32);
  const ModelStateBytes f32_kept =
      chunked_model_states(layout, 2, Precision::BF16, setup.optimizer, Precision::FP32);
  host.grads += f32_slice.grads;
  host.chunk_padding += f32_kept.grads - f32_slice.grads;
  if (share.master == 0) {
    const ModelStateBytes mixed =
        zero_model_states(psi, stage, dp, Precision::BF16, setup.optimizer, grads);
    host.master += mixed.master;
    host.chunk_padding +=
        chunked_model_states(layout, stage, Precision::BF16, setup.optimizer, grads).master -
        mixed.master;
  }
}

// Bytes of one element of the dtype the gradient reductions send, where it is not the
// gradients' (CommStaging::needed); 0 where they send the gradients as they are.
size_t comm_staging_bytes(const TrainSetup& setup) {
  const Precision comm = comm_precision_of(setup, setup.zero_stage);
  return comm != grad_precision_of(setup, setup.zero_stage) ? dtype_size(dtype_of(comm)) : 0;
}

// On a device, the per-tensor gradient sums' buffer of each store (PolicyStack::tensor_sums);
// ZeRO-Offload sums on its host copies.
int64_t gradient_sums_buffer(const TrainSetup& setup, const ChunkLayout& layout) {
  if (!setup.on_device || setup.offload != Offload::None) return 0;
  return static_cast<int64_t>(
      grad_sums_arena_bytes(layout.num_tensors(), layout.max_tensor_elems()));
}

// The communication buffers: what the runtime allocates (parallel/zero.cpp), whole chunks in
// the compute dtype from a best-fit pool (replayed by simulate_zero_buffers over the step's
// parameter-group accesses; stage 1 reduces in place and needs none), and at any stage the
// staging of communication_data_type (parallel/comm_staging.h). A live limit the runtime
// would reject as smaller than a group's chunks is taken at the least it accepts. Offload moves the
// rank's slices, not the buffers: the same whole chunks are gathered and reduced on the GPU.
int64_t chunk_buffers(const TrainSetup& setup, const ChunkLayout& layout, StageEstimate& st) {
  // One data-parallel rank: ZeRO's slice is the whole chunk, which the ops read in place (the
  // runtime gathers and reduces nothing, parallel/zero.cpp), so there are no buffers.
  if (setup.dp() == 1) return 0;
  // communication_data_type: the reductions send another dtype than the gradients' through
  // staging buffers (parallel/comm_staging.h), at every stage.
  const size_t staging = comm_staging_bytes(setup);
  if (setup.zero_stage < 2 && staging == 0) return 0;
  ZeroBufferPeak b;
  if (setup.zero_stage == 0) {
    b = stage_zero_staging(layout, staging);
  } else {
    const std::vector<BlockGroups> blocks = block_groups(layout);
    const ZeroSettings s = runnable_zero_settings(setup.zero, layout, blocks);
    // The policy decides the order B acquires its groups in (the names are shared: none,
    // selective, full).
    const ActivationPolicy policy = parse_activation_policy(to_string(setup.recompute));
    b = simulate_zero_buffers(layout, blocks, policy, setup.zero_stage, s, setup.grad_accum,
                              bytes_per_param(setup.precision), staging);
  }
  // A stage of zb-v holds two models, each with its own buffers.
  st.comm_buffers.bytes += b.bytes;
  st.comm_buffers.buffers += b.buffers;
  st.comm_buffers.grad_buffers += b.grad_buffers;
  st.comm_buffers.param_buffers += b.param_buffers;
  st.comm_buffers.persistent += b.persistent;
  st.comm_buffers.staging += b.staging;
  return b.bytes;
}

// ZeRO-Offload on a device with 16-bit parameters: a host copy of each owned parameter slice
// in that dtype, what the update rounds the master into and copies up (OffloadPolicy's
// staging; a converting copy through the host is no device copy). Not with offload_param: its
// parameter slices are on the host, which the update writes.
int64_t offload_staging_bytes(const TrainSetup& setup, const ChunkLayout& layout) {
  if (!setup.on_device || setup.offload != Offload::Optimizer || setup.precision == Precision::FP32)
    return 0;
  int64_t elems = 0;
  for (int c = 0; c < layout.num_chunks(); ++c) elems += layout.slice_elems(c);
  return elems * bytes_per_param(setup.precision);
}

// The pipeline's kept buffers of the tied embedding's gathered gradient
// (PipelineEngine::sum_tied_gradient): under ZeRO with dp > 1, the whole chunk holding each end
// of the tie the model has (wte on the first virtual stage, its copy lm_head.weight on the
// last), in the gradients' memory and dtype: ZeRO-Offload's f32 host slices, else the
// gradients' precision on the compute tier.
int64_t tied_gather_bytes(const TrainSetup& setup, const ChunkLayout& layout) {
  if (setup.pp == 1 || setup.zero_stage == 0 || setup.dp() == 1 || !setup.model.tied_head())
    return 0;
  const size_t elem = setup.offload != Offload::None
                          ? sizeof(float)
                          : dtype_size(dtype_of(grad_precision_of(setup, setup.zero_stage)));
  int64_t bytes = 0;
  for (const char* name : {"wte", "lm_head.weight"}) {
    const int id = layout.index_of(name);
    if (id < 0) continue;
    const int64_t elems = layout.chunk_elems(layout.slot(id).chunk);
    bytes += static_cast<int64_t>(Arena::aligned(static_cast<size_t>(elems) * elem));
  }
  return bytes;
}

// The models of one rank of stage `s`, as the runtime builds them, in its chunk order: one model
// (one store) per stage; under zb-v two, virtual stages s and 2p-1-s of 2p, so that stage 0
// holds the embedding and the final norm and head; interleaved v, virtual stages k p + s of v p.
std::vector<RankCoords> stage_models(const TrainSetup& setup, int s) {
  const int p = setup.pp, v = setup.virtual_stages;
  if (p > 1 && setup.schedule == Schedule::ZBV)
    return {{setup.tp, 0, 2 * p, s}, {setup.tp, 0, 2 * p, 2 * p - 1 - s}};
  if (p > 1 && setup.schedule == Schedule::Interleaved && v > 1) {
    std::vector<RankCoords> models;
    for (int k = 0; k < v; ++k) models.push_back({setup.tp, 0, v * p, k * p + s});
    return models;
  }
  return {{setup.tp, 0, p, s}};
}

// A model's blocks (pipeline/block_parts.h): its layers, with the embedding on the first
// virtual stage and the final norm and head on the last.
int model_blocks(const TrainSetup& setup, const RankCoords& c) {
  return setup.model.n_layer / c.pp + (c.stage == 0) + (c.stage == c.pp - 1);
}

// The schedule the runtime runs, where it is fixed by the keys; none where it is built from
// measurements (zb-auto) or a cost model (zb-1p, zb-2p): the estimate is then a bound from
// inflight_microbatches.
std::optional<pipeline::Schedule> fixed_schedule(const TrainSetup& setup) {
  if (setup.pp == 1 || inflight_is_bound(setup.schedule, setup.pp)) return std::nullopt;
  pipeline::ScheduleOptions o;
  o.schedule = to_string(setup.schedule);
  o.stages = setup.pp;
  o.microbatches = setup.grad_accum;
  o.chunks = setup.schedule == Schedule::Interleaved ? setup.virtual_stages : 2;
  return pipeline::build_schedule(o);
}

// The micro-batch slots each model of stage `s` holds and the W stashes, from `schedule`
// (pipeline/stage_peaks.h, as PipelineEngine sizes its pools).
std::optional<pipeline::StagePeaks> schedule_peaks(
    const TrainSetup& setup, const std::optional<pipeline::Schedule>& schedule, int s) {
  if (!schedule) return std::nullopt;
  std::vector<int> blocks;
  for (const RankCoords& c : stage_models(setup, s)) blocks.push_back(model_blocks(setup, c));
  return pipeline::stage_peaks(*schedule, s, blocks);
}

std::vector<ChunkLayout> stage_layouts(const TrainSetup& setup, int s) {
  std::vector<ChunkLayout> layouts;
  for (const RankCoords& c : stage_models(setup, s)) {
    layouts.push_back(make_layout(setup.model, c));
    layouts.back().pack(setup.chunk_target_elems(), setup.dp());
  }
  return layouts;
}

// Two stores' chunk plans as one (zb-v's two model chunks on a stage).
ChunkPlan merge(ChunkPlan a, const ChunkPlan& b) {
  a.chunks += b.chunks;
  a.largest_chunk_elems = std::max(a.largest_chunk_elems, b.largest_chunk_elems);
  a.total_elems += b.total_elems;
  a.owned_elems += b.owned_elems;
  a.payload_elems += b.payload_elems;
  return a;
}

// The zero-bubble schedules run B and W as separate actions (W deferred); the others run them
// together, block by block, so one W stash slot serves the whole step.
bool splits_backward(Schedule s) {
  return s == Schedule::ZBH1 || s == Schedule::ZBH2 || s == Schedule::ZB1P || s == Schedule::ZB2P ||
         s == Schedule::ZBAuto || s == Schedule::ZBV;
}

// The bytes of the runtime's arenas on one rank of stage `s` (model/arena_bytes.h, the sizes
// GPT::make_micro_batch gives them): the op workspace of each of the `inflight` micro-batches,
// the W stash pool and the validation micro-batch (one sequence, nothing kept for backward; its
// saved arena holds the residual boundaries). With `peaks` (a fixed schedule) each chunk's slots
// and the stashes are the schedule's; without, `inflight` micro-batches and one stash, or under
// a schedule that defers W one per block of each. `saved`: the training slots' saved arenas
// (what the activations estimate models).
int64_t runtime_arena_bytes(const TrainSetup& setup, int s, int inflight,
                            const std::optional<pipeline::StagePeaks>& peaks, int64_t& saved) {
  ArenaShape shape;
  shape.config = &setup.model;
  shape.policy = parse_activation_policy(to_string(setup.recompute));
  shape.tp = setup.tp;
  shape.sp = setup.sp && setup.tp > 1;
  shape.partition_activations = setup.partition_activations && setup.tp > 1 && !shape.sp;
  shape.cpu_checkpointing = shape.partition_activations && setup.cpu_checkpointing;
  shape.act_bytes = static_cast<size_t>(bytes_per_param(setup.precision));
  const int B = setup.micro_batch, T = static_cast<int>(setup.seq());
  int64_t workspace = 0, stash_slot = 0, eval = 0, blocks = 0, exact = 0;
  saved = 0;
  const std::vector<RankCoords> models = stage_models(setup, s);
  for (size_t i = 0; i < models.size(); ++i) {
    const RankCoords& c = models[i];
    const int per = setup.model.n_layer / c.pp, first = c.stage * per;
    const bool embedding = c.stage == 0, head = c.stage == c.pp - 1;
    const MicroBatchArenas train =
        micro_batch_arenas(shape, first, first + per, embedding, head, B, T);
    const MicroBatchArenas val =
        micro_batch_arenas(shape, first, first + per, embedding, head, 1, T, /*training=*/false);
    const int64_t slots = peaks ? peaks->slots[i] : inflight;
    saved += slots * static_cast<int64_t>(Arena::aligned(train.saved));
    workspace = std::max<int64_t>(workspace, train.workspace);
    if (peaks) exact += peaks->slots[i] * static_cast<int64_t>(train.workspace);
    stash_slot = std::max<int64_t>(stash_slot, train.stash_slot);
    eval += val.saved + val.workspace;
    blocks += model_blocks(setup, c);
  }
  // Each chunk's slots have their own workspace; the stash pool holds the schedule's peak.
  if (peaks) return exact + peaks->stashes * stash_slot + eval;
  const int64_t slots = splits_backward(setup.schedule) && setup.pp > 1 ? inflight * blocks : 1;
  return inflight * workspace + slots * stash_slot + eval;
}

}  // namespace

MemoryEstimate estimate_memory(const TrainSetup& setup) {
  const int p = setup.pp;
  const int v = setup.schedule == Schedule::Interleaved && p > 1 ? setup.virtual_stages : 1;
  const int layers = setup.model.n_layer / p;
  const ActivationShape shape = activation_shape(setup);
  const std::optional<pipeline::Schedule> schedule = fixed_schedule(setup);
  MemoryEstimate est;
  est.ranks_per_host = setup.ranks_per_host();
  for (int s = 0; s < p; ++s) {
    StageEstimate st;
    st.stage = s;
    st.layers = layers;
    // The tensors of a rank of this stage and their chunks, exactly as the runtime's chunk store
    // lays them out (every tp rank of a stage holds the same sizes; tp rank 0 stands for all).
    const std::vector<ChunkLayout> layouts = stage_layouts(setup, s);
    int64_t buffers = 0;
    for (size_t i = 0; i < layouts.size(); ++i) {
      st.chunks = i == 0 ? chunk_plan(layouts[i]) : merge(st.chunks, chunk_plan(layouts[i]));
      st.params += layouts[i].num_params();
      place_model_states(setup, layouts[i], st);
      buffers += chunk_buffers(setup, layouts[i], st) + gradient_sums_buffer(setup, layouts[i]);
      const int64_t tied = tied_gather_bytes(setup, layouts[i]);
      st.tied_gather_bytes += tied;
      (setup.offload != Offload::None ? st.host.temp_buffers : buffers) += tied;
      st.host.temp_buffers += offload_staging_bytes(setup, layouts[i]);
      st.largest_group_chunks =
          std::max(st.largest_group_chunks, largest_group_chunk_bytes(setup, layouts[i]));
    }

    const int m = setup.grad_accum;
    const Schedule sched = setup.schedule;
    const double limit = setup.memory_limit;
    st.inflight_microbatches = inflight_microbatches(sched, p, s, m, v, limit);
    st.inflight_layer_microbatches = inflight_layer_microbatches(sched, p, s, m, v, layers, limit);
    int64_t act = layer_activation_bytes(shape, setup.recompute) * st.inflight_layer_microbatches;
    if (s == input_layer_stage(sched, p))
      act += input_layer_activation_bytes(shape) * input_layer_microbatches(sched, p, m, v, limit);
    if (s == output_layer_stage(sched, p))
      act +=
          output_layer_activation_bytes(shape) * output_layer_microbatches(sched, p, m, v, limit);
    act += partition_buffer_bytes(shape, setup.recompute) * st.inflight_microbatches;  // P_a
    // Each chunk that is not the last virtual stage keeps its output and that output's gradient
    // per micro-batch slot (from the schedule; a bound's in-flight count, once, without it).
    const std::optional<pipeline::StagePeaks> peaks = schedule_peaks(setup, schedule, s);
    if (peaks) {
      const std::vector<RankCoords> models = stage_models(setup, s);
      for (size_t i = 0; i < models.size(); ++i)
        if (models[i].stage != models[i].pp - 1)
          act += stage_boundary_bytes(shape) * peaks->slots[i];
    } else if (p > 1 && s != output_layer_stage(sched, p)) {
      act += stage_boundary_bytes(shape) * st.inflight_microbatches;
    }
    st.device.activations = act;
    st.host.activations =
        host_checkpoint_bytes(shape, setup.recompute) * st.inflight_layer_microbatches;
    st.device.temp_buffers = buffers + recompute_workspace_bytes(shape, setup.recompute) +
                             backward_workspace_bytes(shape);
    // The arenas hold the working set temp counts (recompute, backward temporaries): the rest,
    // and what the training slots' saved arenas hold beyond the activations modelled (the
    // batch's tokens and targets, each allocation's alignment).
    int64_t saved = 0;
    const int64_t arenas = runtime_arena_bytes(setup, s, st.inflight_microbatches, peaks, saved);
    st.device.arenas = std::max<int64_t>(
        0, arenas + std::max<int64_t>(0, saved - act) - (st.device.temp_buffers - buffers));
    est.stages.push_back(st);
  }
  for (const StageEstimate& st : est.stages) {
    if (st.device.total() > est.stages[est.peak_stage].device.total()) est.peak_stage = st.stage;
    if (st.host.total() > est.host_per_rank.total()) est.host_per_rank = st.host;
  }
  est.device = est.stages[est.peak_stage].device;
  est.host = est.host_per_rank.times(est.ranks_per_host);
  fit_device_limit(setup, est);
  return est;
}

}  // namespace tide
