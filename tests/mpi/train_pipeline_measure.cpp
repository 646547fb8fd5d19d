// Measurement of the pipeline executor on p = world size ranks (where 12 layers divide: 2, 3, 4):
//
//   * Stage times come from the trace: a fabricated trace (known spans and message times) gives
//     exactly its T_F, T_B, T_W, bubbles and latency, on every rank alike.
//   * The automatic schedule from a measured warm-up step is the zb-auto generator's output for
//     the measured figures, the same on every rank, and training with it is bitwise the 1F1B run.
//   * Activation memory, measured from the micro-batch arenas: the peak over the step is the
//     schedule's in-flight count times one micro-batch's bytes (M_B, also measured), within 5%;
//     at stage 0 that count is the paper's: p M_B for 1F1B and ZB-H1, (2p - 1) M_B for ZB-H2
//     (Qi et al. Table 2).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "mpi_test.h"
#include "tide/core/error.h"
#include "tide/core/rng.h"
#include "tide/core/trace.h"
#include "tide/exec/pipeline_engine.h"
#include "tide/exec/pipeline_measure.h"
#include "tide/pipeline/generators.h"

using namespace tide;

namespace {

constexpr int kB = 2, kT = 16, kVocab = 41;

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
  OptimizerSettings o;
  o.lr.type = LrScheduleType::CONSTANT;
  o.lr.lr = 3e-3;
  o.grad_clip = 1.0f;
  return o;
}

void fill(int mb, int32_t* inputs, int32_t* targets) {
  const PhiloxStream rng{23, static_cast<uint64_t>(mb)};
  for (int i = 0; i < kB * kT; ++i) {
    inputs[i] = static_cast<int32_t>(rng.uint(2 * i) % kVocab);
    targets[i] = static_cast<int32_t>(rng.uint(2 * i + 1) % kVocab);
  }
}

std::unique_ptr<GPT> stage_model(const ProcessGroup& world) {
  ModelOptions o;
  o.pp = world.size();
  o.stage = world.rank();
  auto gpt = std::make_unique<GPT>(config(), ActivationPolicy::SAVE_ALL, o);
  gpt->init_weights(7);
  return gpt;
}

bool divides(const ProcessGroup& world) {
  return config().n_layer % world.size() == 0;
}

// The same value on every rank?
bool same_on_all(ProcessGroup& world, double v) {
  std::vector<double> all(static_cast<size_t>(world.size()));
  world.all_gather(Tensor(&v, Shape{2}, DType::I32),
                   Tensor(all.data(), Shape{2 * world.size()}, DType::I32));
  for (double x : all)
    if (std::memcmp(&x, &v, sizeof v) != 0) return false;
  return true;
}

}  // namespace

// A trace made by hand, so the figures are known: stage r runs M F of 100 (r + 1) us and M
// fused backwards of 300 us (B, then an empty W) whose block parts split 2:1 into input and
// weight gradient; stage r sends micro-batch j's activation at 10000 j + 1000 r us and stage
// r + 1 waits for it until exactly 50 us after both the send and its receive were posted (its
// "wait recv" ends when the receive completes).
TEST(PipelineMeasure, FiguresComeFromTheTrace) {
  ProcessGroup& world = mpi_test::world();
  const int p = world.size(), r = world.rank(), M = 2 * p;
  const pipeline::Schedule s = pipeline::one_f_one_b(p, M);
  Tracer t(r);
  const double base = 1e9;  // the steady clock's microseconds, shared by the ranks
  for (int j = 0; j < M; ++j) {
    const double at = base + 10000.0 * j + 1000.0 * r;
    t.add("F", "action", 0, at + 60, 100.0 * (r + 1), {{"mb", j}, {"chunk", 0}});
    t.add("B", "action", 0, at + 1000, 300, {{"mb", j}, {"chunk", 0}});
    t.add("W", "action", 0, at + 1300, 0, {{"mb", j}, {"chunk", 0}});
    t.add("backward", "compute", 0, at + 1000, 200, {{"block", 0}, {"mb", j}});
    t.add("weight", "compute", 0, at + 1200, 100, {{"block", 0}, {"mb", j}});
    if (r + 1 < p) t.add("send act", "comm", 1, at, 5, {{"mb", j}, {"peer", r + 1}});
    if (r > 0) {
      // The activation stage r - 1 sent at `at - 1000` arrives 50 us after both sides are
      // ready: the receive is posted before the send (even j) or 30 us after it (odd j).
      const double sent = at - 1000, posted = j % 2 ? sent + 30 : sent - 350;
      const double arrive = std::max(sent, posted) + 50;
      t.add("wait recv", "comm", 0, arrive - 20, 20, {{"mb", j}});
      t.add("recv act", "comm", 2, posted, arrive - posted, {{"mb", j}, {"peer", r - 1}});
    }
  }
  const StepMeasurement m = measure_step(t, s, world);
  ASSERT_EQ(m.stages.size(), static_cast<size_t>(p));
  for (int i = 0; i < p; ++i) {
    EXPECT_NEAR(m.stages[i].t_f, 100e-6 * (i + 1), 1e-12) << "stage " << i;
    EXPECT_NEAR(m.stages[i].t_b, 200e-6, 1e-12) << "stage " << i;
    EXPECT_NEAR(m.stages[i].t_w, 100e-6, 1e-12) << "stage " << i;
    // First action F(0) at 1000 i + 60, last W ends at 10000 (M - 1) + 1000 i + 1300; times
    // count from stage 0's start (base + 60).
    EXPECT_NEAR(m.measured[i].start, 1000.0 * i * 1e-6, 1e-9) << "stage " << i;
    EXPECT_NEAR(m.measured[i].end, (10000.0 * (M - 1) + 1000.0 * i + 1240) * 1e-6, 1e-9);
    const double busy = M * (100.0 * (i + 1) + 300) * 1e-6;
    EXPECT_NEAR(m.measured[i].busy, busy, 1e-9) << "stage " << i;
    const double span = m.measured[i].end - m.measured[i].start;
    EXPECT_NEAR(m.measured[i].bubble_rate, (span - busy) / span, 1e-9) << "stage " << i;
  }
  EXPECT_NEAR(m.t_comm, 50e-6, 1e-9);
  EXPECT_EQ(m.waited_receives, (p - 1) * M);
  // The generator's figures: the slowest stage's.
  EXPECT_NEAR(m.generator_costs().t_f, 100e-6 * p, 1e-12);
  EXPECT_TRUE(same_on_all(world, m.t_comm + m.stages[p - 1].t_f));

  // A trace that is not one step of the schedule is a clear error (on every rank alike: each
  // checks its own trace before the collective).
  Tracer empty(r);
  try {
    measure_step(empty, s, world);
    ADD_FAILURE() << "an empty trace was measured";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exactly one traced step"), std::string::npos) << e.what();
  }
}

// A measured warm-up step, then the automatic schedule: the generator's output for the
// measured figures, the same on every rank, and the run bitwise equal to plain 1F1B.
TEST(PipelineMeasure, AutoScheduleFromMeasurementTrainsLike1F1B) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  omp_set_num_threads(1);
  const int p = world->size(), M = 2 * p, steps = 3;
  if (!divides(*world)) GTEST_SKIP() << "12 layers do not divide over " << p << " stages";
  auto batch = [](int mb, int32_t* in, int32_t* tg) { fill(mb, in, tg); };

  std::vector<float> losses[2];
  std::vector<float> params[2];
  StepMeasurement measured;
  for (int run = 0; run < 2; ++run) {
    std::unique_ptr<GPT> gpt = stage_model(*world);
    PipelineEngine engine(*gpt, world, pipeline::one_f_one_b(p, M), kB, kT, optimizer());
    for (int64_t s = 0; s < steps; ++s) {
      const StepStats st = run == 1 && s == 0
                               ? auto_schedule_step(engine, *world, s, 5, batch, 0, &measured)
                               : engine.step(s, 5, batch);
      losses[run].push_back(st.loss);
      losses[run].push_back(static_cast<float>(st.grad_norm));
    }
    const ChunkLayout& lay = gpt->store().layout();
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const Tensor t = gpt->store().tensor(ChunkKind::PARAM, id);
      params[run].insert(params[run].end(), t.f32(), t.f32() + t.numel());
    }
    if (run == 1) {
      ASSERT_EQ(engine.schedule().name, "zb-auto");
      // Positive figures for every stage, from the trace.
      for (int i = 0; i < p; ++i) {
        EXPECT_GT(measured.stages[i].t_f, 0) << "stage " << i;
        EXPECT_GT(measured.stages[i].t_b, 0) << "stage " << i;
        EXPECT_GT(measured.stages[i].t_w, 0) << "stage " << i;
        EXPECT_GT(measured.measured[i].busy, 0) << "stage " << i;
        EXPECT_LE(measured.measured[i].busy,
                  measured.measured[i].end - measured.measured[i].start + 1e-9);
      }
      // What the generator builds for those figures under 1F1B's memory (p micro-batches).
      const pipeline::Schedule want =
          pipeline::zb_auto(p, M, measured.generator_costs(), static_cast<double>(p), "zb-auto");
      EXPECT_EQ(engine.schedule().actions, want.actions);
      for (int i = 0; i < p; ++i)
        EXPECT_EQ(pipeline::compute_order(engine.schedule(), i), pipeline::compute_order(want, i))
            << "stage " << i;
      // The same schedule on every rank (and the same figures).
      std::string order;
      for (int i = 0; i < p; ++i) order += pipeline::compute_order(engine.schedule(), i) + "|";
      EXPECT_TRUE(same_on_all(*world, static_cast<double>(std::hash<std::string>{}(order))))
          << order;
      EXPECT_TRUE(same_on_all(*world, measured.generator_costs().t_b));
      // Its slots: the peak it holds, at most the limit.
      EXPECT_LE(engine.micro_batch_slots(), p);
    }
  }
  ASSERT_EQ(losses[0].size(), losses[1].size());
  EXPECT_EQ(std::memcmp(losses[0].data(), losses[1].data(), losses[0].size() * sizeof(float)), 0)
      << "losses / gradient norms differ from the 1F1B run";
  ASSERT_EQ(params[0].size(), params[1].size());
  EXPECT_EQ(std::memcmp(params[0].data(), params[1].data(), params[0].size() * sizeof(float)), 0)
      << "parameters differ from the 1F1B run";
}

TEST(PipelineMeasure, BadInputIsAClearError) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  const int p = world->size();
  if (!divides(*world)) GTEST_SKIP() << "12 layers do not divide over " << p << " stages";
  std::unique_ptr<GPT> gpt = stage_model(*world);
  PipelineEngine engine(*gpt, world, pipeline::one_f_one_b(p, 2 * p), kB, kT, optimizer());
  try {
    engine.reschedule(pipeline::one_f_one_b(p, 3 * p));
    ADD_FAILURE() << "a schedule with other micro-batches was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("micro-batches"), std::string::npos) << e.what();
  }
  // A memory limit below one micro-batch: refused before the step touches the model.
  const std::vector<float> before(gpt->store().tensor(ChunkKind::PARAM, 0).f32(),
                                  gpt->store().tensor(ChunkKind::PARAM, 0).f32() +
                                      gpt->store().tensor(ChunkKind::PARAM, 0).numel());
  try {
    auto_schedule_step(
        engine, *world, 0, 5, [](int mb, int32_t* in, int32_t* tg) { fill(mb, in, tg); }, 0.5);
    ADD_FAILURE() << "a memory limit of half a micro-batch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least 1"), std::string::npos) << e.what();
  }
  const Tensor after = gpt->store().tensor(ChunkKind::PARAM, 0);
  EXPECT_EQ(std::memcmp(before.data(), after.data, before.size() * sizeof(float)), 0);
  EXPECT_EQ(engine.schedule().name, "1f1b");
}

class PipelineMemory : public testing::TestWithParam<const char*> {};

// Peak activation memory per stage, measured, against the paper's in-flight counts.
TEST_P(PipelineMemory, PeakIsTheInFlightCountTimesOneMicroBatch) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  omp_set_num_threads(1);
  const int p = world->size(), i = world->rank(), M = 2 * p;
  if (!divides(*world)) GTEST_SKIP() << "12 layers do not divide over " << p << " stages";
  const std::string name = GetParam();
  const pipeline::Schedule s = name == "1f1b"    ? pipeline::one_f_one_b(p, M)
                               : name == "zb-h1" ? pipeline::zb_h1(p, M)
                                                 : pipeline::zb_h2(p, M);
  // The schedule's in-flight count on this stage: micro-batches between their F and their W
  // (the simulator with M_B = M_W = 1: tide keeps a micro-batch's activations until its W);
  // at stage 0 it is the paper's p (1F1B, ZB-H1) or 2p - 1 (ZB-H2).
  const double in_flight = pipeline::simulate(s, pipeline::CostModel{}).stages[i].peak_memory;
  if (i == 0) EXPECT_EQ(in_flight, name == "zb-h2" ? 2 * p - 1 : p) << name;
  std::unique_ptr<GPT> gpt = stage_model(*world);
  PipelineEngine engine(*gpt, world, s, kB, kT, optimizer());
  engine.step(0, 5, [](int mb, int32_t* in, int32_t* tg) { fill(mb, in, tg); });
  const PipelineEngine::ActivationMemory& mem = engine.activation_memory();
  ASSERT_GT(mem.micro_batch_bytes, 0u);
  const double ratio =
      static_cast<double>(mem.peak_bytes) / static_cast<double>(mem.micro_batch_bytes);
  EXPECT_NEAR(ratio, in_flight, 0.05 * in_flight)
      << name << ", stage " << i << ": peak " << mem.peak_bytes << " bytes, M_B "
      << mem.micro_batch_bytes;
  EXPECT_GE(mem.peak_total_bytes, mem.peak_bytes);
  if (s.split_backward) EXPECT_GT(mem.peak_stash_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineMemory, testing::Values("1f1b", "zb-h1", "zb-h2"),
                         [](const testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });
