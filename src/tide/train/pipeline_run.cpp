#include "tide/train/pipeline_run.h"

#include <cmath>
#include <cstring>

#include "tide/checkpoint/init_from.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/checkpoint/tp_checkpoint.h"
#include "tide/config/pipeline_setup.h"
#include "tide/kernels/mover.h"
#include "tide/model/host_twin.h"
#include "tide/parallel/zero.h"
#include "tide/pipeline/generators.h"

namespace tide {

namespace {

// The mesh a PipelineRun built from a bare world runs on: stages x dp x tp.size, checked.
Topology pipeline_mesh(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world,
                       PipelineTensorParallel tp) {
  const int p = cfg.pipeline_stages, n = world->size();
  TIDE_CHECK(tp.size >= 1 && n % (p * tp.size) == 0,
             "pipeline.stages={} x tensor_parallel.size={} does not divide the {} ranks of this "
             "run (each data-parallel replica holds stages x tp ranks); launch a multiple of {} "
             "ranks or change one of them",
             p, tp.size, n, p * std::max(tp.size, 1));
  return Topology(std::move(world), MeshShape{.tp = tp.size, .dp = n / (p * tp.size), .pp = p});
}

}  // namespace

PipelineRun::PipelineRun(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world,
                         const OptimizerSettings& opt, PipelineTensorParallel tp,
                         const StoreOptions& store, AutoPlacementSettings placement,
                         const OpContext& op, Allocator* activations)
    : PipelineRun(cfg, pipeline_mesh(cfg, std::move(world), tp), opt, tp.sequence_parallel, store,
                  placement, op, activations) {}

PipelineRun::PipelineRun(const TrainConfig& cfg, const Topology& mesh, const OptimizerSettings& opt,
                         bool sequence_parallel, const StoreOptions& store,
                         AutoPlacementSettings placement, const OpContext& op,
                         Allocator* activations)
    : world_(mesh.world_ptr()),
      pp_(mesh.group_ptr(MeshAxis::PP)),
      dp_(mesh.group_ptr(MeshAxis::DP)),
      tp_(mesh.group_ptr(MeshAxis::TP)) {
  pipeline::Schedule schedule = make_pipeline_schedule(cfg);
  TIDE_CHECK(mesh.shape().pp == schedule.stages,
             "the mesh {} has {} pipeline stages where pipeline.stages={}", mesh.shape().str(),
             mesh.shape().pp, schedule.stages);
  const int dp = dp_->size();
  TIDE_CHECK(tp_->size() > 1 || !sequence_parallel,
             "sequence parallelism needs tensor_parallel.size > 1 (it splits the sequence over "
             "the tp ranks); set tensor_parallel.size or turn sequence_parallel off");
  zero_sliced_ = cfg.zero.stage >= 1;
  if (cfg.pipeline_schedule == "zb-auto") {
    // The warm-up step runs 1F1B (within its peak of p micro-batches in flight); a tighter
    // memory limit warms up with the limit's zb-auto from unit costs, which fits it.
    measure_pending_ = true;
    memory_limit_ = cfg.pipeline_memory_limit;
    if (memory_limit_ == 0 || memory_limit_ >= schedule.stages)
      schedule = pipeline::one_f_one_b(schedule.stages, schedule.microbatches);
  }
  std::vector<GPT*> models;
  for (int c = 0; c < schedule.chunks; ++c) {
    ModelOptions o;
    o.store = store;
    o.chunk_elems = chunk_elems_from_mib(cfg.chunk_size_mb);
    o.pp = schedule.virtual_stages();
    o.stage = schedule.virtual_stage(pp_->rank(), c);
    o.op = op;
    o.activations = activations;
    if (tp_->size() > 1) {
      o.tp = tp_;
      o.sequence_parallel = sequence_parallel;
    }
    if (zero_sliced_) {  // ZeRO: the kinds of its stage sliced over the stage's replicas
      o.group_size = dp;
      o.store.group_rank = dp_->rank();
      o.store.sliced_kinds = zero_sliced_kinds(cfg.zero.stage);
    }
    chunks_.push_back(std::make_unique<GPT>(cfg.model, cfg.activation_policy, o));
    chunks_.back()->init_weights(cfg.seed);
    models.push_back(chunks_.back().get());
    eval_mbs_.push_back(
        chunks_.back()->make_micro_batch(1, cfg.seq_len, nullptr, /*training=*/false));
  }
  engine_ = std::make_unique<PipelineEngine>(models, pp_, std::move(schedule), cfg.micro_batch,
                                             cfg.seq_len, opt, dp_, zero_settings(cfg), placement);
}

StepStats PipelineRun::step(int64_t step, uint64_t seed, const Engine::BatchFn& batch,
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

size_t PipelineRun::activation_bytes() const {
  size_t b = engine_->activation_bytes() + engine_->comm_buffer_bytes();
  for (const auto& mb : eval_mbs_) b += mb->saved.capacity() + mb->workspace.capacity();
  return b;
}

bool PipelineRun::needs_data() const {
  for (const auto& c : chunks_)
    if (c->has_embedding() || c->has_head()) return true;
  return false;
}

float PipelineRun::evaluate(DataLoader& val, int64_t n) {
  const pipeline::Schedule& sch = engine_->schedule();
  const int V = sch.virtual_stages(), me = pp_->rank();
  const int last = sch.locate(V - 1).first;
  double sum = 0, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    val.seek(0, static_cast<uint64_t>(i));  // batch i = sequence i (micro-batch 1, in order)
    val.next_batch();
    // The virtual stages in order: this rank runs its own; an activation crosses ranks as a
    // blocking message (tag: the consumer's virtual stage), or is copied on the same rank.
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
          pp_->recv(in, from, v);
        }
      }
      model.forward(mb);
      if (v + 1 < V && sch.locate(v + 1).first != me) {
        synchronize(model.op());  // on a device: the forward's ops are queued
        pp_->send(model.output_activation(mb), sch.locate(v + 1).first, v + 1);
      }
    }
    // (loss sum, positions with a target) of the sequence, as doubles carried bit for bit.
    double r[2] = {0, 0};
    if (me == last) {
      const MicroBatch& mb = *eval_mbs_[sch.locate(V - 1).second];
      r[0] = mb.seq_loss_sum[0];
      r[1] = static_cast<double>(mb.seq_targets[0]);
    }
    pp_->broadcast(Tensor(r, Shape{4}, DType::I32), last);
    sum += r[0];  // in sequence order, as the single-rank evaluate adds them
    count += r[1];
  }
  return count > 0 ? static_cast<float>(sum / count) : NAN;
}

void PipelineRun::save(const std::string& path, const CheckpointInfo& info) const {
  std::vector<const ChunkStore*> stores;
  // Tensor parallelism: each chunk's tp shards (under ZeRO-1/2 first its slices, over dp)
  // gathered into its unsharded stage layout on (tp 0, dp 0) (tp_checkpoint.h), which writes
  // the stage whole, as a ZeRO-0 run without tp would.
  const bool gathered = tp_->size() > 1;
  std::vector<std::unique_ptr<ChunkStore>> whole;
  std::vector<std::unique_ptr<GPT>> twins;
  if (gathered) {
    for (const auto& c : chunks_) {
      const std::unique_ptr<GPT> twin = host_copy(*c);  // on a device (host memory is read)
      whole.push_back(gather_tp_shards(twin ? *twin : *c, /*with_optimizer_state=*/true,
                                       zero_sliced_ ? dp_.get() : nullptr));
    }
    for (const auto& w : whole) stores.push_back(w.get());
  } else {
    // A device model's chunks are written from host copies (the writers read host memory).
    for (const auto& c : chunks_) {
      std::unique_ptr<GPT> twin = host_copy(*c);
      stores.push_back(twin ? &twin->store() : &c->store());
      if (twin) twins.push_back(std::move(twin));
    }
  }
  // Without tp, ZeRO-1/2: every replica writes its slices; otherwise replica 0 the stage whole.
  const bool slices = zero_sliced_ && !gathered;
  const int dp = slices ? dp_->size() : 1;
  if ((slices || dp_->rank() == 0) && tp_->rank() == 0)
    save_pipeline_stage_shard(path, stores, info, /*with_optimizer_state=*/true, pp_->rank(),
                              pp_->size(), slices ? dp_->rank() : 0, dp);
  world_->barrier();  // every shard is written (a rank that failed ended the job)
  if (world_->rank() == 0) commit_sharded_checkpoint(path, pp_->size() * dp);
  world_->barrier();
}

void PipelineRun::load(const std::string& path) {
  // Any checkpoint (checkpoint_source.h); under tp every rank reads the stage's tensors whole
  // and keeps its shard's elements (under ZeRO-1/2 of the sliced kinds only its slice).
  const CheckpointSource source(path);
  for (const auto& c : chunks_)
    with_host_chunks(
        *c, [&](GPT& m) { load_checkpoint_any(source, m, /*with_optimizer_state=*/true); });
  engine_->sync_params();  // ZeRO's whole copies and offload's master weights follow
}

void PipelineRun::init_from(const std::string& path) {
  for (const auto& c : chunks_) {
    if (tp_->size() == 1) {
      with_host_chunks(*c, [&](GPT& m) { init_weights_from(path, m); });
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
}

}  // namespace tide
