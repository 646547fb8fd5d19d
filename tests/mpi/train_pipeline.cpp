// The pipeline executor on p = world size ranks (one stage each; runs where 12 layers divide
// over p: 2, 3, 4 ranks), m in {p, 2p} micro-batches, dropout 0.1, 20 steps (issue #13's count).
//
//   * Every schedule (GPipe, 1F1B, ZB-H1, ZB-H2, zb-auto; interleaved and ZB-V with two chunks per
//     stage where 12 layers divide over 2p virtual stages: p = 2, 3) trains bitwise like every
//     other: the order of F/B/W never changes the arithmetic (each parameter receives its W
//     contributions in micro-batch order whatever the schedule).
//   * Against the single-rank Engine on the same global batch (one rank, m accumulation
//     micro-batches): losses and gradient norms to 1e-5, every stage's parameters to 1e-4.
//     Not bitwise: the tied embedding's gradient is summed from two accumulators (stage 0's
//     wte, the last stage's lm_head) instead of one, and the norm is blocked per stage.
//   * The last stage's lm_head copy stays bitwise equal to stage 0's wte.
//
// Each rank runs the single-rank baseline itself (a tiny model) and compares its own stage.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <map>
#include <string>

#include "dp_runs.h"
#include "mpi_test.h"
#include "test_batches.h"
#include "tide/comm/local_process_group.h"
#include "tide/core/rng.h"
#include "tide/core/trace.h"
#include "tide/exec/engine.h"
#include "tide/exec/pipeline_engine.h"
#include "tide/pipeline/generators.h"

using namespace tide;

namespace {

// (B,T,C) messages of 6 KiB: above shared memory's eager limit (4 KiB), so a receive posted late
// would hold up the sender (rendezvous), as with real activation sizes.
constexpr int kB = 3, kT = 32, kSteps = 20, kVocab = 41;
constexpr uint64_t kInitSeed = 17, kRunSeed = 5;

GPTConfig config() {
  GPTConfig c;
  c.n_layer = 12;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = kVocab;
  c.max_seq_len = kT;
  c.dropout = 0.1f;
  return c;
}

OptimizerSettings optimizer() {
  return dp_runs::pipeline_test_optimizer();
}

// Micro-batch mb (the same every step, so a few steps visibly lower the loss): tokens follow
// next = 5*prev+3 (mod V) with 25% noise.
void fill(int mb, int32_t* inputs, int32_t* targets) {
  const PhiloxStream rng{11, static_cast<uint64_t>(mb)};
  test::fill_noisy_chain(rng, kB, kT, kVocab, 5, 3, inputs, targets);
}

struct StageRun {
  std::vector<float> losses, norms;
  std::map<std::string, std::vector<float>> params;  // this rank's, by name
  std::vector<float> whole;  // pipelined runs: every rank's, in whole-model order
};

void record_params(GPT& gpt, StageRun& r) {
  const ChunkLayout& lay = gpt.store().layout();
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const Tensor t = gpt.store().tensor(ChunkKind::PARAM, id);
    r.params[lay.slot(id).name].assign(t.f32(), t.f32() + t.numel());
  }
}

StageRun single_rank(int M) {
  GPT gpt(config(), ActivationPolicy::SAVE_ALL);
  gpt.init_weights(kInitSeed);
  Engine engine(gpt, std::make_shared<LocalProcessGroup>(), data_parallel_schedule(M), kB, kT,
                optimizer());
  StageRun r;
  for (int64_t s = 0; s < kSteps; ++s) {
    const StepStats st =
        engine.step(s, kRunSeed, [&](int mb, int32_t* in, int32_t* tg) { fill(mb, in, tg); });
    r.losses.push_back(st.loss);
    r.norms.push_back(static_cast<float>(st.grad_norm));
  }
  record_params(gpt, r);
  return r;
}

// With `traced`, every step is traced and the trace of each is checked against the schedule:
// one action span per F, B and W, one transfer span per send and receive.
StageRun pipelined(std::shared_ptr<ProcessGroup> world, const pipeline::Schedule& schedule,
                   ActivationPolicy policy, bool traced = false) {
  // One GPT per model chunk, each built for its virtual stage.
  std::vector<std::unique_ptr<GPT>> chunks;
  std::vector<GPT*> models;
  for (int c = 0; c < schedule.chunks; ++c) {
    ModelOptions o;
    o.pp = schedule.virtual_stages();
    o.stage = schedule.virtual_stage(world->rank(), c);
    chunks.push_back(std::make_unique<GPT>(config(), policy, o));
    chunks.back()->init_weights(kInitSeed);
    models.push_back(chunks.back().get());
  }
  PipelineEngine engine(models, world, schedule, kB, kT, optimizer());
  // Activation memory is allocated from the schedule: as many micro-batches as the simulator
  // counts in flight on this stage (m_b = m_w = 1: one unit from F until W). (With several
  // chunks the simulator counts 1/v per chunk's micro-batch; the engine sizes each chunk.)
  const pipeline::SimResult sim = pipeline::simulate(schedule, pipeline::CostModel{});
  if (schedule.chunks == 1)
    EXPECT_EQ(engine.micro_batch_slots(), sim.stages[world->rank()].peak_memory)
        << schedule.name << ", stage " << world->rank();
  StageRun r;
  for (int64_t s = 0; s < kSteps; ++s) {
    Tracer tracer(world->rank());
    const StepStats st = engine.step(
        s, kRunSeed, [&](int mb, int32_t* in, int32_t* tg) { fill(mb, in, tg); },
        traced ? &tracer : nullptr);
    r.losses.push_back(st.loss);
    r.norms.push_back(static_cast<float>(st.grad_norm));
    if (!traced) continue;
    std::map<std::string, int> want, got;
    for (const pipeline::Action& a : schedule.actions[world->rank()]) {
      if (pipeline::is_compute(a.op)) ++want[pipeline::op_name(a.op)];
      if (a.op == pipeline::Op::SendAct) ++want["send act"];
      if (a.op == pipeline::Op::RecvAct) ++want["recv act"];
      if (a.op == pipeline::Op::SendGrad) ++want["send grad"];
      if (a.op == pipeline::Op::RecvGrad) ++want["recv grad"];
    }
    for (const TraceEvent& e : tracer.events())
      if (e.cat == "action" || e.name.starts_with("send ") || e.name.starts_with("recv "))
        ++got[e.name];
    EXPECT_EQ(got, want) << schedule.name << ", stage " << world->rank() << ", step " << s;
  }
  for (GPT* m : models) record_params(*m, r);
  // The whole model's parameters on every rank: each rank contributes the tensors it holds
  // (lm_head.weight, wte's copy, left out), zeros elsewhere; a sum with zeros is exact.
  const ChunkLayout whole = make_layout(config());
  std::vector<int64_t> offset;
  int64_t n = 0;
  for (int id = 0; id < whole.num_tensors(); ++id) {
    offset.push_back(n);
    n += whole.slot(id).numel;
  }
  r.whole.assign(static_cast<size_t>(n), 0.0f);
  for (const auto& [name, v] : r.params)
    if (name != "lm_head.weight")
      std::copy(v.begin(), v.end(), r.whole.begin() + offset[whole.find(name)]);
  world->all_reduce(Tensor(r.whole.data(), {n}), ReduceOp::Sum);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

class Pipeline : public testing::TestWithParam<int> {};  // micro-batches per stage count

TEST_P(Pipeline, SchedulesMatchTheSingleRankRunAndEachOtherBitwise) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  omp_set_num_threads(1);  // ranks share few cores
  const int p = world->size(), M = GetParam() * p;
  if (config().n_layer % p != 0) GTEST_SKIP() << "12 layers do not divide over " << p << " stages";
  const StageRun base = single_rank(M);

  std::vector<std::pair<const char*, pipeline::Schedule>> schedules = {
      {"1f1b", pipeline::one_f_one_b(p, M)},
      {"zb-h1", pipeline::zb_h1(p, M)},
      {"gpipe", pipeline::gpipe(p, M)},
      {"zb-h2", pipeline::zb_h2(p, M)},
      // The automatic schedule under 1F1B's memory (zb-1p), for equal unit costs.
      {"zb-1p", pipeline::zb_auto(p, M, pipeline::CostModel{},
                                  pipeline::one_f_one_b_peak(p, M, pipeline::CostModel{}))}};
  // Two chunks per stage need the 12 layers to divide over 2p virtual stages.
  if (config().n_layer % (2 * p) == 0) {
    schedules.push_back({"interleaved", pipeline::interleaved_1f1b(p, M, 2)});
    schedules.push_back({"zb-v", pipeline::zb_v(p, M)});
  }
  std::vector<StageRun> runs;
  for (const auto& [name, schedule] : schedules) {
    // Activation policies do not change the arithmetic either: alternate them.
    const ActivationPolicy policy =
        runs.size() % 2 ? ActivationPolicy::SELECTIVE : ActivationPolicy::SAVE_ALL;
    // ZB-H1 is traced: a traced step computes the same bits (compared with 1F1B below).
    runs.push_back(pipelined(world, schedule, policy, std::string(name) == "zb-h1"));
    const StageRun& r = runs.back();
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(r.losses[s], base.losses[s], 1e-5 * base.losses[s]) << name << ", step " << s;
      EXPECT_NEAR(r.norms[s], base.norms[s], 1e-5 * base.norms[s]) << name << ", step " << s;
    }
    for (const auto& [tensor, v] : r.params) {
      const std::string ref_name = tensor == "lm_head.weight" ? "wte" : tensor;
      for (const auto& [lo, hi] : dp_runs::compared_ranges(ref_name, v.size())) {
        const std::vector<float> a(v.begin() + lo, v.begin() + hi);
        const std::vector<float> b(base.params.at(ref_name).begin() + lo,
                                   base.params.at(ref_name).begin() + hi);
        EXPECT_LE(dp_runs::rel_error(a, b), 1e-4) << name << ", stage " << world->rank() << ", "
                                                  << tensor << " [" << lo << ", " << hi << ")";
      }
    }
    if (runs.size() > 1) {
      EXPECT_TRUE(same_bits(r.losses, runs[0].losses)) << name << " vs 1f1b: losses";
      EXPECT_TRUE(same_bits(r.norms, runs[0].norms)) << name << " vs 1f1b: gradient norms";
      EXPECT_TRUE(same_bits(r.whole, runs[0].whole)) << name << " vs 1f1b: parameters";
    }
  }
  // Training moved, so the comparisons mean something.
  EXPECT_LT(base.losses.back(), base.losses.front() - 0.1f);

  // The tied copies: stage 0's wte and the last stage's lm_head, bitwise.
  std::vector<float> tied = world->rank() == 0       ? runs[0].params.at("wte")
                            : world->rank() == p - 1 ? runs[0].params.at("lm_head.weight")
                                                     : std::vector<float>();
  if (world->rank() == 0 || world->rank() == p - 1) {
    std::vector<float> other(tied.size());
    const int peer = world->rank() == 0 ? p - 1 : 0;
    auto sent = world->send_async(Tensor(tied.data(), {static_cast<int64_t>(tied.size())}), peer);
    world->recv(Tensor(other.data(), {static_cast<int64_t>(other.size())}), peer);
    sent->wait();
    EXPECT_TRUE(same_bits(tied, other)) << "wte and lm_head.weight drifted apart";
  }
  world->barrier();
}

INSTANTIATE_TEST_SUITE_P(MicroBatches, Pipeline, testing::Values(1, 2),
                         [](const testing::TestParamInfo<int>& i) {
                           return i.param == 1 ? std::string("m_eq_p") : std::string("m_eq_2p");
                         });

TEST(PipelineErrors, BadSchedulesAreClearErrors) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  const int p = world->size();
  if (config().n_layer % p != 0) GTEST_SKIP() << "12 layers do not divide over " << p << " stages";
  ModelOptions o;
  o.pp = p;
  o.stage = world->rank();
  GPT gpt(config(), ActivationPolicy::SAVE_ALL, o);
  auto expect_error = [&](const pipeline::Schedule& s, const char* words) {
    try {
      PipelineEngine e(gpt, world, s, kB, kT, optimizer());
      ADD_FAILURE() << "schedule '" << s.name << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_error(pipeline::one_f_one_b(p + 1, 2 * p), "stages");
  expect_error(pipeline::zb_v(p, 2 * p), "chunk");
}
