#include "tide/train/step_runner.h"

#include <cmath>
#include <cstring>

#include "tide/checkpoint/init_from.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/checkpoint/tp_checkpoint.h"
#include "tide/config/pipeline_setup.h"
#include "tide/exec/engine.h"
#include "tide/kernels/mover.h"
#include "tide/model/host_twin.h"
#include "tide/parallel/zero.h"
#include "tide/pipeline/generators.h"

namespace tide {

namespace {

// The mesh cfg asks for on a bare world: pipeline.stages x dp x tensor_parallel.size, checked.
Topology mesh_of(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world) {
  const int p = cfg.pipeline_stages, t = cfg.tensor_parallel, n = world->size();
  TIDE_CHECK(t >= 1 && n % (p * t) == 0,
             "pipeline.stages={} x tensor_parallel.size={} does not divide the {} ranks of this "
             "run (each data-parallel replica holds stages x tp ranks); launch a multiple of {} "
             "ranks or change one of them",
             p, t, n, p * std::max(t, 1));
  return Topology(std::move(world), MeshShape{.tp = t, .dp = n / (p * t), .pp = p});
}

// The schedule the run executes: the data-parallel one with one stage (B and W fused per block,
// the least memory), else the configured pipeline schedule.
pipeline::Schedule schedule_of(const TrainConfig& cfg) {
  return cfg.pipeline_stages == 1 ? data_parallel_schedule(cfg.grad_accum)
                                  : make_pipeline_schedule(cfg);
}

}  // namespace

StepRunner::StepRunner(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world,
                       const OptimizerSettings& opt)
    : StepRunner(cfg, mesh_of(cfg, std::move(world)), opt) {}

StepRunner::StepRunner(const TrainConfig& cfg, const Topology& mesh, const OptimizerSettings& opt,
                       const StoreOptions& store, AutoPlacementSettings placement,
                       const OpContext& op, Allocator* activations)
    : world_(mesh.world_ptr()),
      pp_(mesh.group_ptr(MeshAxis::PP)),
      dp_(mesh.group_ptr(MeshAxis::DP)),
      tp_(mesh.group_ptr(MeshAxis::TP)) {
  pipeline::Schedule schedule = schedule_of(cfg);
  TIDE_CHECK(mesh.shape().pp == schedule.stages,
             "the mesh {} has {} pipeline stages where pipeline.stages={}", mesh.shape().str(),
             mesh.shape().pp, schedule.stages);
  const int dp = dp_->size();
  const bool sequence_parallel = cfg.sequence_parallel;
  TIDE_CHECK(tp_->size() > 1 || !sequence_parallel,
             "sequence parallelism needs tensor_parallel.size > 1 (it splits the sequence over "
             "the tp ranks); set tensor_parallel.size or turn sequence_parallel off");
  zero_sliced_ = cfg.zero.stage >= 1;
  collective_forward_ = cfg.zero.stage == 3;
  if (schedule.stages > 1 && cfg.pipeline_schedule == "zb-auto") {
    // The warm-up step runs 1F1B (within its peak of p micro-batches in flight); a tighter
    // memory limit warms up with the limit's zb-auto from unit costs, which fits it.
    measure_pending_ = true;
    memory_limit_ = cfg.pipeline_memory_limit;
    if (memory_limit_ == 0 || memory_limit_ >= schedule.stages)
      schedule = pipeline::one_f_one_b(schedule.stages, schedule.microbatches);
  }
  if (!op.device.is_cpu()) host_staging_ = make_host_allocator(op.device, /*pinned=*/true);
  copies_ = make_copy_context(op);
  std::vector<GPT*> models;
  for (int c = 0; c < schedule.chunks; ++c) {
    ModelOptions o;
    o.store = store;
    o.chunk_elems = chunk_elems_from_mib(cfg.chunk_size_mb);
    o.pp = schedule.virtual_stages();
    o.stage = schedule.virtual_stage(pp_->rank(), c);
    o.op = op;
    o.copies = copies_;
    o.activations = activations;
    o.host_staging = host_staging_.get();
    if (tp_->size() > 1) {
      o.tp = tp_;
      o.sequence_parallel = sequence_parallel;
    }
    // The chunks pack evenly over the stage's replicas; ZeRO slices the kinds of its stage.
    o.group_size = dp;
    o.store.group_rank = dp_->rank();
    o.store.sliced_kinds = zero_sliced_kinds(cfg.zero.stage);
    o.partition_activations = cfg.partition_activations;  // (one stage only: check_settings)
    o.cpu_checkpointing = cfg.cpu_checkpointing;
    chunks_.push_back(std::make_unique<GPT>(cfg.model, cfg.activation_policy, o));
    if (!store.placed_kinds) chunks_.back()->init_weights(cfg.seed);
    models.push_back(chunks_.back().get());
    eval_mbs_.push_back(
        chunks_.back()->make_micro_batch(1, cfg.seq_len, nullptr, /*training=*/false));
  }
  engine_ = std::make_unique<PipelineEngine>(models, pp_, std::move(schedule), cfg.micro_batch,
                                             cfg.seq_len, opt, dp_, zero_settings(cfg), placement);
  if (store.placed_kinds) {  // the engine's placement has allocated the chunks: now they fill
    for (const auto& c : chunks_) c->init_weights(cfg.seed);
    engine_->sync_params();  // ZeRO-3's persistent chunks, gathered as the engine was built
  }
  // Post-validation fills a pipeline's bubble with the update; one stage has none (engine.h).
  if (engine_->schedule().stages == 1) engine_->set_post_validation(false);
}

StepStats StepRunner::step(int64_t step, uint64_t seed, const PipelineEngine::BatchFn& batch,
                           Tracer* tracer) {
  if (!measure_pending_) return engine_->step(step, seed, batch, tracer);
  measure_pending_ = false;
  StepMeasurement m;
  const StepStats st = auto_schedule_step(*engine_, *pp_, step, seed, batch, memory_limit_, &m);
  if (world_->size() > pp_->size()) {
    // The replicas, and the tp ranks of a stage, measured separately; their gradient
    // reductions (dp) and block collectives (tp) pair up only if every rank runs the same
    // schedule: all take world rank 0's figures (every pipeline gathered its stages').
    std::vector<double> f;
    for (const pipeline::CostModel& c : m.stages)
      f.insert(f.end(), {c.t_f, c.t_b, c.t_w, c.t_comm});
    f.push_back(m.t_comm);
    world_->broadcast(Tensor(f.data(), Shape{2 * static_cast<int64_t>(f.size())}, DType::I32), 0);
    for (size_t i = 0; i < m.stages.size(); ++i) {
      pipeline::CostModel& c = m.stages[i];
      c.t_f = f[4 * i];
      c.t_b = f[4 * i + 1];
      c.t_w = f[4 * i + 2];
      c.t_comm = f[4 * i + 3];
    }
    m.t_comm = f.back();
    engine_->reschedule(auto_schedule(m, engine_->schedule().microbatches, memory_limit_));
  }
  measured_.simulated = pipeline::simulate(engine_->schedule(), m.stages);
  measured_.measurement = std::move(m);
  measured_new_ = true;
  return st;
}

size_t StepRunner::activation_bytes() const {
  size_t b = engine_->activation_bytes() + engine_->comm_buffer_bytes();
  for (const auto& mb : eval_mbs_) b += mb->saved.capacity() + mb->workspace.capacity();
  return b;
}

size_t StepRunner::model_state_bytes() const {
  size_t b = 0;
  for (const auto& chunk : chunks_) b += chunk->store().total_bytes();
  return b;
}

bool StepRunner::needs_data() const {
  for (const auto& c : chunks_)
    if (c->has_embedding() || c->has_head()) return true;
  return false;
}

float StepRunner::evaluate(DataLoader& val, int64_t n) {
  const pipeline::Schedule& sch = engine_->schedule();
  const int V = sch.virtual_stages(), me = pp_->rank();
  const auto [last, last_chunk] = sch.locate(V - 1);
  // Each replica scores a share (its stages and tp ranks run the same forwards). Under ZeRO-3 a
  // forward gathers parameters over the replicas, so every rank runs `share` forwards; one past
  // the end scores sequence 0 again and drops the result.
  const int dp = dp_->size(), rank = dp_->rank();
  const int64_t share = (n + dp - 1) / dp;  // sequences per replica (the last may be short)
  // Per sequence of this replica's share: (sum of its position losses, positions with a
  // target), as doubles carried bit for bit through int32 words.
  std::vector<double> mine(2 * share, 0.0), all(2 * share * dp, 0.0);
  for (int64_t k = 0; k < share && (collective_forward_ || rank * share + k < n); ++k) {
    const bool counted = rank * share + k < n;
    val.seek(0, counted ? static_cast<uint64_t>(rank * share + k) : 0);
    val.next_batch();
    // The virtual stages in order: this rank runs its own; an activation crosses ranks as a
    // blocking message, or is copied on the same rank. Untagged (tag 0): blocking and in
    // virtual-stage order on every rank, the messages match in issue order, as a device's
    // group (NCCL) matches them.
    for (int v = 0; v < V; ++v) {
      const auto [stage, c] = sch.locate(v);
      if (stage != me) continue;
      GPT& model = *chunks_[c];
      MicroBatch& mb = *eval_mbs_[c];
      const GPT::HostBatch host = model.host_batch(mb);
      std::memcpy(host.tokens, val.inputs().data(), mb.tokens.nbytes());
      std::memcpy(host.targets, val.targets().data(), mb.targets.nbytes());
      mb.training = false;
      if (v > 0) {
        const auto [from, from_chunk] = sch.locate(v - 1);
        const Tensor in = model.input_activation(mb);  // (1,T,C)
        if (from == me) {
          copy(model.op(), in, chunks_[from_chunk]->output_activation(*eval_mbs_[from_chunk]));
        } else {
          synchronize(model.op());  // on a device: the previous sequence's ops may read `in`
          pp_->recv(in, from, 0);
        }
      }
      model.forward(mb);
      if (v + 1 < V && sch.locate(v + 1).first != me) {
        synchronize(model.op());  // on a device: the forward's ops are queued
        pp_->send(model.output_activation(mb), sch.locate(v + 1).first, 0);
      }
    }
    double* r = &mine[2 * k];
    if (me == last) {
      const MicroBatch& mb = *eval_mbs_[last_chunk];
      r[0] = mb.seq_loss_sum[0];
      r[1] = static_cast<double>(mb.seq_targets[0]);
    }
    pp_->broadcast(Tensor(r, Shape{4}, DType::I32), last);
    if (!counted) r[0] = r[1] = 0;
  }
  if (dp > 1)
    dp_->all_gather(Tensor(mine.data(), Shape{4 * share}, DType::I32),
                    Tensor(all.data(), Shape{4 * share * dp}, DType::I32));
  else
    all = mine;
  double sum = 0, count = 0;
  for (int64_t i = 0; i < n; ++i) {  // in sequence order, whatever the split
    sum += all[2 * i];
    count += all[2 * i + 1];
  }
  return count > 0 ? static_cast<float>(sum / count) : NAN;
}

bool StepRunner::save_is_collective() const {
  return pp_->size() > 1 || zero_sliced_ || tp_->size() > 1;
}

void StepRunner::save(const std::string& path, const CheckpointInfo& info) const {
  // Tensor parallelism: each chunk's tp shards (under ZeRO-1..3 first its slices, over dp)
  // gathered into its unsharded stage layout on (tp 0, dp 0) (tp_checkpoint.h), which writes
  // the stage whole, as a ZeRO-0 run without tp would.
  const bool gathered = tp_->size() > 1;
  // Without tp, ZeRO-1..3: every replica writes its slices; otherwise replica 0 the stage whole.
  const bool slices = zero_sliced_ && !gathered;
  // One stage that rank 0 holds whole (or gathers): one file.
  const bool one_file = pp_->size() == 1 && !slices;
  if (!save_is_collective() && world_->rank() != 0) return;
  std::vector<const ChunkStore*> stores;
  std::vector<std::unique_ptr<ChunkStore>> whole;
  for (const auto& c : chunks_) {
    if (!gathered) {  // device chunks are copied to the host a tensor at a time (copies below)
      stores.push_back(&c->store());
      continue;
    }
    // The tp gather reads host memory: a device model's chunks go through a host copy.
    const std::unique_ptr<GPT> twin = host_copy(*c);
    whole.push_back(gather_tp_shards(twin ? *twin : *c, /*with_optimizer_state=*/true,
                                     zero_sliced_ ? dp_.get() : nullptr));
    stores.push_back(whole.back().get());
  }
  const OpContext* copies = gathered ? nullptr : &chunks_.front()->op();
  const bool writer = (slices || dp_->rank() == 0) && tp_->rank() == 0;
  if (one_file) {
    if (world_->rank() == 0)
      save_checkpoint(path, *stores[0], info, /*with_optimizer_state=*/true, copies);
    if (gathered) world_->barrier();  // the file is complete before any rank reads it
    return;
  }
  const int dp = slices ? dp_->size() : 1;
  if (writer)
    save_pipeline_stage_shard(path, stores, info, /*with_optimizer_state=*/true, pp_->rank(),
                              pp_->size(), slices ? dp_->rank() : 0, dp, copies);
  world_->barrier();  // every shard is written (a rank that failed ended the job)
  if (world_->rank() == 0) commit_sharded_checkpoint(path, pp_->size() * dp);
  world_->barrier();
}

void StepRunner::load(const std::string& path) {
  // Any checkpoint (checkpoint_source.h); under tp every rank reads the stage's tensors whole
  // and keeps its shard's elements (under ZeRO-1/2 of the sliced kinds only its slice).
  const CheckpointSource source(path);
  for (const auto& c : chunks_) {
    if (tp_->size() == 1) {  // device chunks are written a tensor at a time (load_into_store)
      load_checkpoint_any(source, *c, /*with_optimizer_state=*/true);
      continue;
    }
    // The tp scatter writes host memory: a device model's chunks go through a host copy.
    with_host_chunks(
        *c, [&](GPT& m) { load_checkpoint_any(source, m, /*with_optimizer_state=*/true); });
  }
  engine_->sync_params();  // ZeRO's whole copies and offload's master weights follow
}

void StepRunner::init_from(const std::string& path) {
  for (const auto& c : chunks_) {
    if (tp_->size() == 1) {  // device chunks are written a tensor at a time
      init_weights_from(path, *c);
      continue;
    }
    // The chunk's virtual stage unsharded (t = 1, parameters only), read as a run without tp
    // reads it, then this rank's shard of it kept.
    ModelOptions o;
    o.pp = c->pp();
    o.stage = c->stage();
    o.store.with_optimizer = false;
    GPT whole(c->config(), ActivationPolicy::SAVE_ALL, o);
    init_weights_from(path, whole);
    with_host_chunks(
        *c, [&](GPT& m) { scatter_to_tp_shard(whole.store(), m, /*with_optimizer_state=*/false); });
  }
  engine_->sync_params();  // ZeRO's whole copies and offload's master weights follow
}

}  // namespace tide
