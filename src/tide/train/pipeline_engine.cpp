#include "tide/train/pipeline_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "tide/optim/grad_norm.h"
#include "tide/train/optimizer_step.h"

namespace tide {

using pipeline::Op;

// A send or receive in flight, and its span in the trace (from posting to the wait that saw it
// done).
struct PipelineEngine::Transfer {
  WorkPtr work;
  AsyncTrace trace;
  int mb = -1;

  explicit operator bool() const { return work != nullptr; }
  void wait() {
    work->wait();
    trace.finish();
  }
};

// A micro-batch's home on this stage from the first action that names it (its RecvAct or F)
// to the last (its W, or the SendGrad after a fused backward).
struct PipelineEngine::Slot {
  int mb = -1;  // the micro-batch it runs, -1 when free
  MicroBatch* m = nullptr;
  Transfer recv;                // the activation or gradient being received into it
  std::vector<Transfer> sends;  // isends reading its buffers: waited before the slot is reused
};

namespace {

// Per micro-batch, the indices of the first and last action of `actions` that name it.
struct Span {
  int first = -1, last = -1;
};
std::vector<Span> spans(const std::vector<pipeline::Action>& actions, int M) {
  std::vector<Span> s(M);
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const pipeline::Action& a = actions[i];
    if (a.op == Op::OptimizerStep) continue;
    if (s[a.mb].first < 0) s[a.mb].first = i;
    s[a.mb].last = i;
  }
  return s;
}

// Peak micro-batch slots (spans alive at once) and W stashes ((micro-batch, block) between
// its B and W part) of a stage's action list.
std::pair<int, int> peaks(const pipeline::Schedule& s, int stage, int blocks) {
  const std::vector<pipeline::Action>& actions = s.actions[stage];
  const std::vector<Span> sp = spans(actions, s.microbatches);
  int slots = 0, peak_slots = 1, stashes = 0, peak_stashes = 1;
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const pipeline::Action& a = actions[i];
    if (a.op == Op::OptimizerStep) continue;
    if (sp[a.mb].first == i) peak_slots = std::max(peak_slots, ++slots);
    if (sp[a.mb].last == i) --slots;
    if (!pipeline::is_compute(a.op)) continue;
    for (const pipeline::BlockPart& p : pipeline::block_parts(a.op, blocks, s.split_backward)) {
      if (p.op == Op::B) peak_stashes = std::max(peak_stashes, ++stashes);
      if (p.op == Op::W) --stashes;
    }
  }
  return {peak_slots, peak_stashes};
}

// The squared gradient norm of the whole model from per-tensor sums: `mine[g]` is this rank's
// sum of squares of whole-model tensor g (0 for tensors it does not hold). The ranks' vectors
// are gathered and added in whole-model tensor order, so the result does not depend on which
// stage holds which tensor (every placement and schedule gives the same bits).
double sum_in_model_order(ProcessGroup& group, std::vector<double> mine) {
  const int64_t G = static_cast<int64_t>(mine.size()), p = group.size();
  std::vector<double> all(static_cast<size_t>(G * p));
  // Doubles travel as pairs of int32 (the groups reduce f32; this is only a gather).
  group.all_gather(Tensor(mine.data(), Shape{2 * G}, DType::I32),
                   Tensor(all.data(), Shape{2 * G * p}, DType::I32));
  double sum = 0;
  for (int64_t g = 0; g < G; ++g) {
    double t = 0;  // one rank holds tensor g, the others add exact zeros
    for (int64_t r = 0; r < p; ++r) t += all[r * G + g];
    sum += t;
  }
  return sum;
}

}  // namespace

PipelineEngine::PipelineEngine(GPT& model, std::shared_ptr<ProcessGroup> pipeline,
                               pipeline::Schedule schedule, int B, int T,
                               OptimizerSettings optimizer)
    : model_(model),
      pp_(std::move(pipeline)),
      schedule_(std::move(schedule)),
      opt_(optimizer),
      B_(B),
      T_(T) {
  pipeline::validate(schedule_);
  const int p = pp_->size(), stage = pp_->rank();
  TIDE_CHECK(schedule_.chunks == 1 && schedule_.placement == pipeline::Placement::Looped,
             "the pipeline executor runs one model chunk per stage for now; schedule '{}' has {} "
             "chunks per stage (interleaved and zb-v are not supported yet)",
             schedule_.name, schedule_.chunks);
  TIDE_CHECK(schedule_.stages == p,
             "schedule '{}' has {} stages but the pipeline group has {} ranks; build the "
             "schedule for the group's size",
             schedule_.name, schedule_.stages, p);
  TIDE_CHECK(model_.pp() == p && model_.stage() == stage,
             "rank {} of a {}-stage pipeline holds a model built for stage {} of {}; build it "
             "with ModelOptions pp = {}, stage = {}",
             stage, p, model_.stage(), model_.pp(), p, stage);
  check_lr_schedule(opt_.lr);

  const int blocks = model_.num_blocks();
  const auto [slots, stashes] = peaks(schedule_, stage, blocks);
  b_parts_ = pipeline::block_parts(Op::B, blocks, schedule_.split_backward);
  w_parts_ = pipeline::block_parts(Op::W, blocks, schedule_.split_backward);
  stash_ = StashPool(model_.stash_slot_bytes(B, T), stashes);
  for (int i = 0; i < slots; ++i) {
    mbs_.push_back(model_.make_micro_batch(B, T, &stash_));
    slots_.emplace_back().m = mbs_.back().get();
  }
  const int M = schedule_.microbatches;
  act_from_.assign(M, -1);
  grad_from_.assign(M, -1);
  for (const pipeline::Action& a : schedule_.actions[stage]) {
    if (a.op == Op::RecvAct) act_from_[a.mb] = a.peer;
    if (a.op == Op::RecvGrad) grad_from_[a.mb] = a.peer;
    if (a.op == Op::F) f_order_.push_back(a.mb);
  }
  // Each tensor's place in the whole model (the gradient norm's order); lm_head.weight, the
  // last stage's copy of wte, is left out so that the tied weight counts once.
  const ChunkLayout whole = make_layout(model_.config());
  model_tensors_ = whole.num_tensors();
  const ChunkLayout& mine = model_.store().layout();
  for (int id = 0; id < mine.num_tensors(); ++id) {
    const std::string& name = mine.slot(id).name;
    norm_index_.push_back(name == "lm_head.weight" ? -1 : whole.find(name));
  }
  if (p > 1) {
    // Collective over the pipeline group: every rank takes part, only the two get a group.
    tied_ = pp_->new_group({0, p - 1});
    const ChunkLayout& lay = model_.store().layout();
    if (model_.has_embedding()) tied_id_ = lay.find("wte");
    if (model_.has_head()) tied_id_ = lay.find("lm_head.weight");
  }
}

PipelineEngine::~PipelineEngine() {
  // Never leave a transfer reading or writing freed activation buffers.
  for (Slot& s : slots_) {
    if (s.recv) s.recv.work->wait();
    for (Transfer& t : s.sends) t.work->wait();
  }
}

PipelineEngine::Slot& PipelineEngine::slot_of(int mb, bool take) {
  for (Slot& s : slots_)
    if (s.mb == mb) return s;
  TIDE_CHECK(take, "micro-batch {} is not in flight on stage {}", mb, pp_->rank());
  for (Slot& s : slots_) {
    if (s.mb >= 0) continue;
    for (Transfer& t : s.sends) {  // its buffers are about to be overwritten
      const TraceSpan span(tracer_, "wait send", "comm", {{"mb", t.mb}});
      t.wait();
    }
    s.sends.clear();
    s.mb = mb;
    return s;
  }
  TIDE_FAIL("stage {} has no free micro-batch slot for micro-batch {} (all {} in use)", pp_->rank(),
            mb, slots_.size());
}

void PipelineEngine::wait_recv(Slot& s) {
  if (!s.recv) return;
  if (!s.recv.work->is_completed()) {  // the stage idles: a bubble, in the trace
    const TraceSpan span(tracer_, "wait recv", "comm", {{"mb", s.mb}});
    s.recv.wait();
  } else {
    s.recv.wait();
  }
  s.recv = Transfer{};
}

void PipelineEngine::post_next_act() {
  if (next_f_ >= f_order_.size()) return;
  const int mb = f_order_[next_f_];
  if (act_from_[mb] < 0 || act_posted_[mb]) return;
  // Only a free slot whose sends are done: waiting for a send here could stall this stage
  // where the schedule does not (the receive is then posted at its own action).
  for (Slot& s : slots_) {
    if (s.mb >= 0) continue;
    for (const Transfer& t : s.sends)
      if (!t.work->is_completed()) return;
    Slot& mine = slot_of(mb, /*take=*/true);
    mine.recv = post_recv(model_.input_activation(*mine.m), act_from_[mb], mb, "recv act");
    act_posted_[mb] = true;
    return;
  }
}

PipelineEngine::Transfer PipelineEngine::post_recv(Tensor buf, int peer, int mb, const char* what) {
  Transfer t{nullptr, AsyncTrace::start(tracer_, what, {{"mb", mb}, {"peer", peer}}), mb};
  t.work = pp_->recv_async(buf, peer, mb);
  return t;
}

PipelineEngine::Transfer PipelineEngine::post_send(Tensor buf, int peer, int mb, const char* what) {
  Transfer t{nullptr, AsyncTrace::start(tracer_, what, {{"mb", mb}, {"peer", peer}}), mb};
  t.work = pp_->send_async(buf, peer, mb);
  return t;
}

void PipelineEngine::release(Slot& s) {
  TIDE_ASSERT(!s.recv);  // every receive is consumed by a compute of the same micro-batch
  s.mb = -1;             // its sends are waited when the slot is taken again
}

StepStats PipelineEngine::step(int64_t step, uint64_t seed, const BatchFn& batch, Tracer* tracer) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  ChunkStore& store = model_.store();
  // This step is traced (the store too: chunk moves), and only this step.
  struct TracerScope {
    PipelineEngine& e;
    ~TracerScope() {
      e.model_.store().set_tracer(nullptr);
      e.tracer_ = nullptr;
    }
  } tracer_scope{*this};
  tracer_ = tracer;
  store.set_tracer(tracer);
  const int M = schedule_.microbatches, stage = pp_->rank(), p = pp_->size();
  const std::vector<pipeline::Action>& actions = schedule_.actions[stage];
  const std::vector<Span> sp = spans(actions, M);
  store.zero(ChunkKind::GRAD);
  next_f_ = 0;
  act_posted_.assign(M, false);
  grad_posted_.assign(M, false);
  double loss_sum = 0;
  post_next_act();
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const pipeline::Action& a = actions[i];
    if (a.op == Op::OptimizerStep) continue;  // the rest of this function
    // A micro-batch's slot is taken at its first action (unless its receive took it early).
    Slot& s = slot_of(a.mb, /*take=*/sp[a.mb].first == i);
    MicroBatch& mb = *s.m;
    const int tag = a.mb;  // one message per (micro-batch, direction) per step
    switch (a.op) {
      case Op::RecvAct:  // usually posted already (post_next_act)
        if (!act_posted_[a.mb])
          s.recv = post_recv(model_.input_activation(mb), a.peer, tag, "recv act");
        act_posted_[a.mb] = true;
        break;
      case Op::RecvGrad:  // posted right after F (below)
        TIDE_ASSERT(grad_posted_[a.mb]);
        break;
      case Op::SendAct:
        s.sends.push_back(post_send(model_.output_activation(mb), a.peer, tag, "send act"));
        break;
      case Op::SendGrad:
        s.sends.push_back(post_send(model_.residual_grad(mb), a.peer, tag, "send grad"));
        break;
      case Op::F:
        batch(a.mb, mb.tokens.i32(), mb.targets.i32());
        mb.training = true;
        mb.seed = seed;
        mb.step = static_cast<uint64_t>(step);
        mb.index = a.mb;
        mb.seq0 = static_cast<uint64_t>(a.mb) * B_;  // the single-rank run's numbering
        mb.dloss = 1.0f / static_cast<float>(M);
        mb.tracer = tracer;
        wait_recv(s);
        {
          const TraceSpan span(tracer, "F", "action", {{"mb", a.mb}});
          loss_sum += model_.forward(mb);
        }
        ++next_f_;
        // From here until B(m) nothing touches the residual gradient: receive into it now.
        if (grad_from_[a.mb] >= 0) {
          s.recv = post_recv(model_.residual_grad(mb), grad_from_[a.mb], tag, "recv grad");
          grad_posted_[a.mb] = true;
        }
        break;
      case Op::B:
      case Op::W: {
        wait_recv(s);
        const TraceSpan span(tracer, a.op == Op::B ? "B" : "W", "action", {{"mb", a.mb}});
        for (const pipeline::BlockPart& part : a.op == Op::B ? b_parts_ : w_parts_)
          if (part.op == Op::B)
            model_.backward_input_block(mb, part.block);
          else
            model_.backward_weight_block(mb, part.block, /*mark_grads=*/false);
        break;
      }
      case Op::OptimizerStep:
        break;
    }
    if (sp[a.mb].last == i) release(s);
    post_next_act();
  }
  const auto t_comm = Clock::now();
  StepStats st;
  {
    const TraceSpan span(tracer, "finish gradients", "comm");
    for (Slot& s : slots_) {
      for (Transfer& t : s.sends) t.wait();
      s.sends.clear();
    }
    // The tied embedding: the first stage's wte and the last stage's lm_head both become the
    // sum of the two gradients (a + b = b + a: the same bits on both).
    if (tied_) tied_->all_reduce(store.tensor(ChunkKind::GRAD, tied_id_), ReduceOp::Sum);
  }
  st.comm_seconds = std::chrono::duration<double>(Clock::now() - t_comm).count();

  // Global gradient norm: each stage's tensors (the last stage's lm_head copy left out: wte
  // counts once), the stage sums added in stage order, so every stage gets the same norm.
  std::optional<TraceSpan> norm_span;
  norm_span.emplace(tracer, "grad norm", "optimizer");
  std::vector<double> norms2(model_tensors_, 0.0);
  for (int id = 0; id < static_cast<int>(norm_index_.size()); ++id) {
    if (norm_index_[id] < 0) continue;
    const Tensor g = store.tensor(ChunkKind::GRAD, id);
    norms2[norm_index_[id]] = grad_norm_squared(g.data, g.dtype, g.numel());
  }
  st.grad_norm = std::sqrt(sum_in_model_order(*pp_, std::move(norms2)));
  norm_span.reset();
  TIDE_CHECK(std::isfinite(st.grad_norm),
             "the gradient norm at step {} is not finite (NaN/Inf); lower the learning rate or "
             "enable gradient_clipping",
             step + 1);
  const float clip = opt_.grad_clip > 0 ? clip_coefficient(st.grad_norm, opt_.grad_clip) : 1.0f;
  st.lr = static_cast<float>(lr_at(step, opt_.lr));
  AdamWHyper h = opt_.adamw;
  h.lr = st.lr;
  {
    const TraceSpan span(tracer, "optimizer", "optimizer");
    adamw_step(store, h, AdamWStep{step + 1, clip});
  }

  // The loss lives on the last stage.
  double loss = loss_sum / M;
  pp_->broadcast(Tensor(&loss, Shape{2}, DType::I32), p - 1);
  st.step = step + 1;
  st.loss = static_cast<float>(loss);
  st.bytes_sent = 0;
  st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
}

}  // namespace tide
