// Tensor parallelism in the model (Megatron-LM) on the world's ranks as one tp group.
//
// Oracle: the single-rank model, built on every rank from the same seed (no communication).
// The tensor-parallel model over t ranks must give its loss and, for every parameter shard,
// the single-rank gradient of the elements it holds (compared through tp_global_index, so the
// ranks' shards together cover every element: the gathered gradient) to 1e-5 relative, with
// dropout 0.1 and each activation policy, for the fused B+W order and for deferred W; a few
// AdamW steps keep the losses equal to 1e-5 and the parameters to 1e-4. Communication is
// measured with the ring algorithm's own counters (bytes actually sent) and compared with
// Megatron's count: 4 all-reduces of (s,b,h) per layer per forward + backward. Each with and
// without sequence parallelism (SP: the residual stream on sequence shards).
//
// World sizes: t = N for N <= 4 (the model has 12 heads: 2, 3 and 4 divide them); with 8
// ranks two groups of 4 run side by side. The vocabulary (67) divides over none of them, so
// the last ranks' padding rows are exercised too.

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mpi_test.h"
#include "tide/comm/ring_traffic.h"
#include "tide/core/error.h"
#include "tide/core/rng.h"
#include "tide/model/gpt.h"
#include "tide/optim/adamw.h"

using namespace tide;

namespace {

constexpr int kB = 2, kT = 24;  // T divides over 2, 3, 4 and 8 ranks (SP)

GPTConfig tiny_config(float dropout) {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 12;
  c.n_embd = 48;
  c.vocab_size = 67;
  c.max_seq_len = kT;
  c.dropout = dropout;
  return c;
}

// The tensor-parallel group: the whole world up to 4 ranks, else consecutive groups of 4.
std::shared_ptr<ProcessGroup> tp_group(CommAlgorithm algorithm = CommAlgorithm::Mpi) {
  omp_set_num_threads(1);  // up to 8 ranks share 2 cores
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(algorithm);
  if (world->size() <= 4) return world;
  return world->split(world->rank() / 4, world->rank());
}

ModelOptions tp_options(std::shared_ptr<ProcessGroup> tp, bool sp = false) {
  ModelOptions o;
  o.tp = std::move(tp);
  o.sequence_parallel = sp;
  return o;
}

using Param = std::tuple<ActivationPolicy, bool>;  // policy, sequence parallelism

std::string param_name(const testing::TestParamInfo<Param>& info) {
  const ActivationPolicy p = std::get<0>(info.param);
  return std::string(p == ActivationPolicy::SAVE_ALL ? "none" : activation_policy_name(p)) +
         (std::get<1>(info.param) ? "_sp" : "");
}

// Tokens over the whole vocabulary (every rank's rows are looked up), some targets ignored;
// the others a function of the token (learnable, so training lowers the loss).
void fill_batch(MicroBatch& mb, int step) {
  const PhiloxStream rng{77, static_cast<uint64_t>(step)};
  for (int64_t i = 0; i < mb.tokens.numel(); ++i) {
    const int32_t token = static_cast<int32_t>(rng.uint(i) % 67);
    mb.tokens.i32()[i] = token;
    mb.targets.i32()[i] = i % 7 == 3 ? -1 : (5 * token + 1) % 67;
  }
  mb.training = true;
  mb.seed = 11;
  mb.step = static_cast<uint64_t>(step);
  mb.seq0 = 0;
  mb.index = 0;
  mb.dloss = 1.0f;
}

// For every tensor of `shard` (kind k), the largest |shard - whole| over its elements relative
// to the largest |whole| of the tensor; padding rows must be 0. Returns the worst tensor's.
// With key_bias_abs >= 0 the key bias elements of c_attn.bias are held to that absolute bound
// instead (an error above it counts as infinite): see adamw_step.
double worst_relative_error(const GPT& shard, const GPT& whole, ChunkKind k, std::string* worst,
                            double key_bias_abs = -1.0) {
  const int64_t C = shard.config().n_embd;
  const ChunkLayout& sl = shard.store().layout();
  const ChunkLayout& wl = whole.store().layout();
  double out = 0.0;
  for (int id = 0; id < sl.num_tensors(); ++id) {
    const std::string& name = sl.slot(id).name;
    const Tensor s = shard.store().tensor(k, id);
    const Tensor w = whole.store().tensor(k, wl.find(name));
    double scale = 0.0, diff = 0.0;
    for (int64_t i = 0; i < w.numel(); ++i) scale = std::max(scale, std::fabs(double{w.f32()[i]}));
    for (int64_t i = 0; i < s.numel(); ++i) {
      const int64_t g = tp_global_index(shard.config(), shard.coords(), name, i);
      const double ref = g < 0 ? 0.0 : w.f32()[g];
      const double d = std::fabs(s.f32()[i] - ref);
      if (key_bias_abs >= 0 && name.ends_with("c_attn.bias") && g >= C && g < 2 * C) {
        if (d > key_bias_abs) diff = INFINITY;
        continue;
      }
      diff = std::max(diff, d);
    }
    const double rel = scale > 0 ? diff / scale : diff;
    if (rel >= out) {
      out = rel;
      *worst = name;
    }
  }
  return out;
}

// Forward, then backward: fused (B and W per block) or every B first, then every W.
float forward_backward(GPT& m, MicroBatch& mb, bool deferred_w) {
  const float loss = m.forward(mb);
  if (!deferred_w) {
    m.backward(mb);
    return loss;
  }
  for (int i = m.num_blocks() - 1; i >= 0; --i) m.backward_input_block(mb, i);
  for (int i = m.num_blocks() - 1; i >= 0; --i) m.backward_weight_block(mb, i, false);
  return loss;
}

class TensorParallel : public testing::TestWithParam<Param> {};

TEST_P(TensorParallel, LossAndEveryGradientMatchOneRank) {
  const std::shared_ptr<ProcessGroup> tp = tp_group();
  const auto [policy, sp] = GetParam();
  const GPTConfig cfg = tiny_config(0.1f);
  GPT whole(cfg, policy, ModelOptions{});
  GPT shard(cfg, policy, tp_options(tp, sp));
  ASSERT_EQ(shard.tp(), tp->size());
  whole.init_weights(3);
  shard.init_weights(3);
  std::string name;
  // The shards hold exactly the single-rank values (the padding rows 0).
  EXPECT_EQ(worst_relative_error(shard, whole, ChunkKind::PARAM, &name), 0.0) << name;

  auto mb_whole = whole.make_micro_batch(kB, kT);
  // Evaluation (no dropout, everything temporary in the workspace) first.
  {
    auto mb = shard.make_micro_batch(kB, kT);
    for (MicroBatch* e : {mb_whole.get(), mb.get()}) {
      fill_batch(*e, 1);
      e->training = false;
    }
    const float eval_whole = whole.forward(*mb_whole);
    EXPECT_NEAR(shard.forward(*mb), eval_whole, 1e-5 * std::fabs(eval_whole)) << "evaluation";
  }
  fill_batch(*mb_whole, 1);
  whole.store().zero(ChunkKind::GRAD, whole.op());
  const float loss_whole = forward_backward(whole, *mb_whole, false);
  for (bool deferred : {false, true}) {
    // Deferred W: a stash slot for every block between its B and its W.
    StashPool pool(shard.stash_slot_bytes(kB, kT), shard.num_blocks());
    auto mb = shard.make_micro_batch(kB, kT, &pool);
    fill_batch(*mb, 1);
    shard.store().zero(ChunkKind::GRAD, shard.op());
    const float loss = forward_backward(shard, *mb, deferred);
    EXPECT_NEAR(loss, loss_whole, 1e-5 * std::fabs(loss_whole)) << "deferred W " << deferred;
    const double err = worst_relative_error(shard, whole, ChunkKind::GRAD, &name);
    EXPECT_LE(err, 1e-5) << name << ", deferred W " << deferred << ", tp " << tp->size();
  }
}

// AdamW on every tensor (a plain loop: each rank updates its shards, and replicated tensors
// get the same gradient on every rank, so they stay equal).
void adamw_step(GPT& m, int t) {
  AdamWHyper h;
  h.lr = 1e-2;
  h.weight_decay = 0.1;
  // The key bias's gradient is 0 in exact arithmetic (softmax ignores a shift shared by every
  // key): both runs give it rounding noise (~1e-9), which Adam's m / sqrt(v) would blow up to
  // +-lr steps of unrelated signs. With eps well above that noise the key bias stays at noise
  // level (~1e-6), which the comparison checks in absolute terms; every other parameter moves
  // with real gradients and is compared relatively.
  h.eps = 1e-6;
  ChunkStore& st = m.store();
  for (int id = 0; id < st.layout().num_tensors(); ++id) {
    const Tensor p = st.tensor(ChunkKind::PARAM, id);
    adamw_reference(p.f32(), st.tensor(ChunkKind::GRAD, id).f32(),
                    st.tensor(ChunkKind::ADAM_M, id).f32(), st.tensor(ChunkKind::ADAM_V, id).f32(),
                    p.numel(), h, AdamWStep{.t = t});
  }
}

TEST_P(TensorParallel, OptimizerStepsKeepLossesAndParametersEqual) {
  const std::shared_ptr<ProcessGroup> tp = tp_group();
  const auto [policy, sp] = GetParam();
  const GPTConfig cfg = tiny_config(0.1f);
  GPT whole(cfg, policy, ModelOptions{});
  GPT shard(cfg, policy, tp_options(tp, sp));
  for (GPT* m : {&whole, &shard}) {
    m->init_weights(5);
    m->store().zero(ChunkKind::ADAM_M, m->op());
    m->store().zero(ChunkKind::ADAM_V, m->op());
  }
  auto mb_whole = whole.make_micro_batch(kB, kT);
  auto mb_shard = shard.make_micro_batch(kB, kT);
  std::vector<float> losses;
  for (int step = 1; step <= 10; ++step) {
    float loss[2];
    int i = 0;
    for (auto [m, mb] : {std::pair{&whole, mb_whole.get()}, std::pair{&shard, mb_shard.get()}}) {
      fill_batch(*mb, step);
      m->store().zero(ChunkKind::GRAD, m->op());
      loss[i++] = forward_backward(*m, *mb, false);
      adamw_step(*m, step);
    }
    EXPECT_NEAR(loss[1], loss[0], 1e-5 * std::fabs(loss[0])) << "step " << step;
    losses.push_back(loss[0]);
  }
  std::string name;
  EXPECT_LE(worst_relative_error(shard, whole, ChunkKind::PARAM, &name, 1e-4), 1e-4) << name;
  // The comparison means something only if training moved the loss.
  EXPECT_LT(losses.back(), losses.front() - 0.05f);
}

INSTANTIATE_TEST_SUITE_P(Policies, TensorParallel,
                         testing::Combine(testing::Values(ActivationPolicy::SAVE_ALL,
                                                          ActivationPolicy::SELECTIVE,
                                                          ActivationPolicy::FULL),
                                          testing::Bool()),
                         param_name);

// Bytes a tp rank sends, measured by the ring algorithm's counters (the messages it actually
// sent), per block part, against Megatron's count: per layer 2 all-reduces of the (B,T,C)
// activation in forward (after the two row-parallel linears) and 2 in backward (the two
// column-parallel inputs' gradients), none in W; a full recomputation repeats the first
// forward one inside B (it stops before the mlp c_proj: the block output is consumed). The
// embedding all-reduces its output; the head all-gathers the row maxima, all-reduces
// [sum of exp | target logit] (2 B T) in forward and d(ln_f) (B,T,C) in B.
// Under SP each all-reduce is a reduce-scatter (forward: after the row-parallel linears;
// backward: the column-parallel inputs' gradients) plus an all-gather (forward: before the
// column-parallel linears; backward: the row-parallel outputs' gradients), the same bytes;
// the full recomputation redoes 2 all-gathers and a reduce-scatter, and otherwise B
// all-gathers ln_1's and ln_2's outputs again (F keeps only their shards, as Megatron does);
// W all-reduces the layernorms' partial gradients (4C per layer, 2C for ln_f).
class TensorParallelComm : public testing::TestWithParam<Param> {};

TEST_P(TensorParallelComm, BytesPerLayerAreFourAllReducesOfTheActivation) {
  if (mpi_test::world().size() > 4) GTEST_SKIP() << "one tp group of the whole world (<= 4)";
  const std::shared_ptr<ProcessGroup> tp = tp_group(CommAlgorithm::Ring);
  const auto [policy, sp] = GetParam();
  const int t = tp->size(), r = tp->rank();
  const GPTConfig cfg = tiny_config(0.1f);
  const int64_t C = cfg.n_embd;
  GPT m(cfg, policy, tp_options(tp, sp));
  m.init_weights(1);
  auto mb = m.make_micro_batch(kB, kT);
  fill_batch(*mb, 1);
  const int64_t act = int64_t{kB} * kT * C;  // (s,b,h) elements
  // Bytes of one collective, from the ring algorithm's element counts.
  const uint64_t all_reduce = 4 * ring_all_reduce_traffic(act, t, r).sent;
  const uint64_t gather = 4 * ring_all_gather_traffic(act / t, t).sent;
  const uint64_t scatter = 4 * ring_reduce_scatter_traffic(act / t, t).sent;
  const uint64_t head_ce = 4 * (ring_all_gather_traffic(kB * kT, t).sent +
                                ring_all_reduce_traffic(2 * kB * kT, t, r).sent);
  auto sent = [&] {
    const uint64_t b = tp->counters().bytes_sent;
    tp->reset_counters();
    return b;
  };
  const int L = cfg.n_layer, head = L + 1;
  tp->reset_counters();
  std::vector<uint64_t> fwd(L + 2), bwd(L + 2), wgt(L + 2);
  for (int i = 0; i < m.num_blocks(); ++i) {
    m.forward_block(*mb, i);
    fwd[i] = sent();
  }
  for (int i = m.num_blocks() - 1; i >= 0; --i) {
    m.backward_input_block(*mb, i);
    bwd[i] = sent();
    m.backward_weight_block(*mb, i, false);
    wgt[i] = sent();
  }
  const bool full = policy == ActivationPolicy::FULL;
  const uint64_t layer = sp ? 2 * (gather + scatter) : 2 * all_reduce;  // F, and B
  const uint64_t recompute = !full ? 0 : sp ? 2 * gather + scatter : all_reduce;
  // Under SP without full recomputation, B all-gathers ln_1's and ln_2's outputs again (F
  // keeps only their shards; W needs them whole): Megatron's extra backward all-gathers.
  const uint64_t regather = sp && !full ? 2 * gather : 0;
  const uint64_t ln_grads = sp ? 4 * ring_all_reduce_traffic(4 * C, t, r).sent : 0;
  for (int l = 1; l <= L; ++l) {
    EXPECT_EQ(fwd[l], layer) << "layer " << l;
    EXPECT_EQ(bwd[l], layer + recompute + regather) << "layer " << l;
    EXPECT_EQ(wgt[l], ln_grads) << "layer " << l;
    // Megatron's theory per layer and forward + backward (without the recomputation): 4
    // all-reduces of (s,b,h), each 2 (t-1)/t of it sent by a ring. Within 1%.
    const double theory = 4.0 * 2.0 * (t - 1) / t * act * 4;
    EXPECT_NEAR(static_cast<double>(fwd[l] + bwd[l] - recompute - regather), theory, 0.01 * theory);
  }
  EXPECT_EQ(fwd[0], sp ? scatter : all_reduce);
  EXPECT_EQ(bwd[0], sp ? gather : 0u);
  EXPECT_EQ(wgt[0], 0u);
  EXPECT_EQ(fwd[head], head_ce + (sp ? gather : 0u));
  EXPECT_EQ(bwd[head], sp ? scatter : all_reduce);
  EXPECT_EQ(wgt[head], sp ? 4 * ring_all_reduce_traffic(2 * C, t, r).sent : 0u);
}

INSTANTIATE_TEST_SUITE_P(Policies, TensorParallelComm,
                         testing::Combine(testing::Values(ActivationPolicy::SAVE_ALL,
                                                          ActivationPolicy::SELECTIVE,
                                                          ActivationPolicy::FULL),
                                          testing::Bool()),
                         param_name);

// Bad input, rejected when the model is built (before any communication), naming the fix.
TEST(TensorParallelBadInput, HeadsThatDoNotDivideOverTheRanks) {
  const std::shared_ptr<ProcessGroup> tp = tp_group();
  GPTConfig c = tiny_config(0.0f);
  c.n_head = tp->size() + 1;  // never divisible by t >= 2
  c.n_embd = 4 * c.n_head;
  try {
    GPT m(c, ActivationPolicy::SAVE_ALL, tp_options(tp));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_head"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor"), std::string::npos) << e.what();
  }
}

TEST(TensorParallelBadInput, VocabularyTooSmallForTheLastRank) {
  const std::shared_ptr<ProcessGroup> tp = tp_group();
  const int t = tp->size();
  GPTConfig c = tiny_config(0.0f);
  // A vocabulary whose ceil(V/t) rows per rank leave the last rank none (e.g. V = 5, t = 4).
  int V = 2;
  while (V < 100 && V > (t - 1) * ((V + t - 1) / t)) ++V;
  if (V >= 100) GTEST_SKIP() << "every vocabulary divides over " << t << " ranks";
  c.vocab_size = V;
  try {
    GPT m(c, ActivationPolicy::SAVE_ALL, tp_options(tp));
    FAIL() << "expected an error for vocab " << V;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

TEST(TensorParallelBadInput, SequenceLengthThatDoesNotDivideUnderSequenceParallelism) {
  const std::shared_ptr<ProcessGroup> tp = tp_group();
  GPT m(tiny_config(0.0f), ActivationPolicy::SAVE_ALL, tp_options(tp, true));
  try {
    m.make_micro_batch(kB, kT - 1);  // 23: prime
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence length 23"), std::string::npos) << e.what();
  }
}

TEST(TensorParallelBadInput, SequenceParallelismWithoutATensorParallelGroup) {
  ModelOptions o;
  o.sequence_parallel = true;
  try {
    GPT m(tiny_config(0.0f), ActivationPolicy::SAVE_ALL, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor-parallel group"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// Activation bytes per layer per rank, measured by the micro-batch's own arena accounting
// (what one transformer block's forward leaves in mb.saved, plus its input: the residual
// stream entry it reads, which Korthikanti et al. count as the first layernorm's input),
// against Korthikanti et al.'s Table 2 in tide's units. Their terms are 2-byte activations
// plus 1-byte dropout masks (two residual masks 2sbh, the attention mask as^2b); tide keeps
// activations of e bytes (the compute dtype: 4 in f32, 2 in bf16, Table 2's case) and no masks
// (Philox redraws them), so each 2-byte sbh term counts e bytes and the mask terms 0; and its
// attention op keeps each row's f32 log-sum-exp (4as b/t bytes) in place of the attention
// core's 5as^2b/t (the probabilities are recomputed in backward, as flash attention does):
//   TP (t = 1: no parallelism)  sbh(10 + 24/t) + 5as^2b/t  ->  e sbh(4 + 12/t) + 4asb/t
//   TP + SP                     sbh(34/t) + 5as^2b/t       ->  e sbh(16/t) + 4asb/t
//   selective                   the same without the attention core's term
//   full recompute              2sbh (the input)           ->  e sbh (e sbh/t under SP)
// The layernorm statistics (4 f32 per position) are not in the formula: a few %.
// Shape: as/h = 16 like GPT-3 175B in the paper (a = 12, s = 64, h = 48), b = 1.
class ActivationMemory : public testing::TestWithParam<Param> {};

TEST_P(ActivationMemory, BytesPerLayerPerRankMatchKorthikantiTable2) {
  const std::shared_ptr<ProcessGroup> tp = tp_group();
  const auto [policy, sp] = GetParam();
  const int64_t t = tp->size(), a = 12, s = 64, h = 48, b = 1;
  if (sp && s % t != 0) GTEST_SKIP() << "s = 64 does not divide over " << t << " ranks";
  GPTConfig cfg = tiny_config(0.1f);
  cfg.max_seq_len = static_cast<int>(s);
  for (const DType dtype : {DType::F32, DType::BF16})
    for (int64_t tt : {int64_t{1}, t}) {
      ModelOptions o = tt == 1 ? ModelOptions{} : tp_options(tp, sp);
      o.store.compute_dtype = dtype;
      GPT m(cfg, policy, o);
      m.init_weights(1);
      auto mb = m.make_micro_batch(static_cast<int>(b), static_cast<int>(s));
      fill_batch(*mb, 1);
      m.forward_block(*mb, 0);  // the embedding
      const size_t before = mb->saved.mark();
      m.forward_block(*mb, 1);  // layer 0
      const bool shard = sp && tt > 1;
      const double e = static_cast<double>(dtype_size(dtype));
      const double input = e * b * s * h / (shard ? tt : 1);  // the layer's input (B,Ts,C)
      const double measured = static_cast<double>(mb->saved.mark() - before) + input;
      const double sbh = static_cast<double>(s * b * h);
      double theory = 0;
      if (policy == ActivationPolicy::FULL) {
        theory = e * sbh / (shard ? tt : 1);
      } else {
        theory = shard ? e * sbh * 16.0 / tt : e * sbh * (4.0 + 12.0 / tt);
        if (policy == ActivationPolicy::SAVE_ALL) theory += 4.0 * a * s * b / tt;
      }
      if (tp->rank() == 0)
        std::printf(
            "{\"dtype\": \"%s\", \"t\": %ld, \"sp\": %s, \"policy\": \"%s\", "
            "\"measured_bytes\": %.0f, \"table2_bytes\": %.0f, \"ratio\": %.4f}\n",
            std::string(dtype_name(dtype)).c_str(), static_cast<long>(tt), shard ? "true" : "false",
            activation_policy_name(policy), measured, theory, measured / theory);
      EXPECT_NEAR(measured, theory, 0.05 * theory) << dtype_name(dtype) << ", t " << tt;
    }
}

INSTANTIATE_TEST_SUITE_P(Policies, ActivationMemory,
                         testing::Combine(testing::Values(ActivationPolicy::SAVE_ALL,
                                                          ActivationPolicy::SELECTIVE,
                                                          ActivationPolicy::FULL),
                                          testing::Bool()),
                         param_name);

}  // namespace
