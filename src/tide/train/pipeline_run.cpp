#include "tide/train/pipeline_run.h"

#include <cmath>
#include <cstring>

#include "tide/train/pipeline_setup.h"
#include "tide/train/sharded_checkpoint.h"

namespace tide {

PipelineRun::PipelineRun(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world,
                         const OptimizerSettings& opt)
    : world_(std::move(world)) {
  pipeline::Schedule schedule = make_pipeline_schedule(cfg);
  TIDE_ASSERT(schedule.stages == world_->size());
  std::vector<GPT*> models;
  for (int c = 0; c < schedule.chunks; ++c) {
    ModelOptions o;
    o.chunk_elems = chunk_elems_from_mib(cfg.chunk_size_mb);
    o.pp = schedule.virtual_stages();
    o.stage = schedule.virtual_stage(world_->rank(), c);
    chunks_.push_back(std::make_unique<GPT>(cfg.model, cfg.activation_policy, o));
    chunks_.back()->init_weights(cfg.seed);
    models.push_back(chunks_.back().get());
    eval_mbs_.push_back(chunks_.back()->make_micro_batch(1, cfg.seq_len));
  }
  engine_ = std::make_unique<PipelineEngine>(models, world_, std::move(schedule), cfg.micro_batch,
                                             cfg.seq_len, opt);
}

size_t PipelineRun::activation_bytes() const {
  size_t b = engine_->activation_bytes();
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
  const int V = sch.virtual_stages(), me = world_->rank();
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
      std::memcpy(mb.tokens.data, val.inputs().data(), mb.tokens.nbytes());
      std::memcpy(mb.targets.data, val.targets().data(), mb.targets.nbytes());
      mb.training = false;
      if (v > 0) {
        const auto [from, from_chunk] = sch.locate(v - 1);
        const Tensor in = model.input_activation(mb);  // (1,T,C)
        if (from == me)
          std::memcpy(in.data, chunks_[from_chunk]->output_activation(*eval_mbs_[from_chunk]).data,
                      in.nbytes());
        else
          world_->recv(in, from, v);
      }
      model.forward(mb);
      if (v + 1 < V && sch.locate(v + 1).first != me)
        world_->send(model.output_activation(mb), sch.locate(v + 1).first, v + 1);
    }
    // (loss sum, positions with a target) of the sequence, as doubles carried bit for bit.
    double r[2] = {0, 0};
    if (me == last) {
      const MicroBatch& mb = *eval_mbs_[sch.locate(V - 1).second];
      r[0] = mb.seq_loss_sum[0];
      r[1] = static_cast<double>(mb.seq_targets[0]);
    }
    world_->broadcast(Tensor(r, Shape{4}, DType::I32), last);
    sum += r[0];  // in sequence order, as the single-rank evaluate adds them
    count += r[1];
  }
  return count > 0 ? static_cast<float>(sum / count) : NAN;
}

void PipelineRun::save(const std::string& path, const CheckpointInfo& info) const {
  std::vector<const ChunkStore*> stores;
  for (const auto& c : chunks_) stores.push_back(&c->store());
  save_pipeline_stage_shard(path, stores, info, /*with_optimizer_state=*/true, world_->rank(),
                            world_->size());
  world_->barrier();  // every stage's shard is written (a rank that failed ended the job)
  if (world_->rank() == 0) commit_sharded_checkpoint(path, world_->size());
  world_->barrier();
}

void PipelineRun::load(const std::string& path) {
  for (const auto& c : chunks_)
    load_checkpoint_shard(path, c->store(), c->config(), /*with_optimizer_state=*/true);
}

}  // namespace tide
