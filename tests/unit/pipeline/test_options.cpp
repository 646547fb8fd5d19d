// Choosing a schedule by name and the errors `tide schedule` prints for bad options.
#include <gtest/gtest.h>

#include "tide/core/error.h"
#include "tide/pipeline/generators.h"

using namespace tide;
using namespace tide::pipeline;

namespace {

ScheduleOptions options(const std::string& name, int p = 4, int m = 8) {
  ScheduleOptions o;
  o.schedule = name;
  o.stages = p;
  o.microbatches = m;
  return o;
}

void expect_error(const ScheduleOptions& o, const std::string& needle) {
  try {
    build_schedule(o);
    FAIL() << "accepted bad options; expected: " << needle;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "error must be one line: " << msg;
  }
}

}  // namespace

TEST(Options, EveryNamedScheduleBuilds) {
  for (const std::string& name : schedule_names()) {
    const Schedule s = build_schedule(options(name));
    EXPECT_EQ(s.name, name);
    EXPECT_NO_THROW(validate(s));
  }
}

TEST(Options, UnknownScheduleNameListsTheChoices) {
  expect_error(options("zb-h3"), "unknown schedule 'zb-h3'; choose one of: gpipe, 1f1b");
}

TEST(Options, InterleavedNeedsMicroBatchesAMultipleOfStages) {
  expect_error(options("interleaved", 4, 2),
               "multiple of stages (m >= p), got m = 2, p = 4; "
               "use --microbatches 4");
  expect_error(options("interleaved", 4, 6), "use --microbatches 8");
}

TEST(Options, TimesMustBePositive) {
  ScheduleOptions o = options("zb-h1");
  o.cost.t_b = 0;
  expect_error(o, "times must be positive");
  o.cost.t_b = 1;
  o.cost.t_w = -1;
  expect_error(o, "times must be positive");
  o.cost.t_w = 1;
  o.cost.t_comm = -0.5;
  expect_error(o, "--tcomm must be zero or positive");
}

TEST(Options, MemoryLimitBelowOneMicroBatchFitsNothing) {
  ScheduleOptions o = options("zb-auto");
  o.cost.m_b = 2;
  o.cost.m_w = 1;
  o.memory_limit = 1.5;
  expect_error(o, "--memory-limit 1.5 is below one micro-batch's activations (--mb 2)");
}

TEST(Options, FixedScheduleOverTheLimitSuggestsZbAuto) {
  ScheduleOptions o = options("zb-h2");
  o.memory_limit = 4;  // ZB-H2 needs 2p-1 = 7 micro-batches on stage 0
  expect_error(o, "schedule zb-h2 needs 7 activation memory per stage, above --memory-limit 4");
  o.schedule = "zb-auto";
  EXPECT_LE(simulate(build_schedule(o), o.cost).peak_memory, 4.0);
}

TEST(Options, MwCannotExceedMb) {
  ScheduleOptions o = options("1f1b");
  o.cost.m_w = 2;
  expect_error(o, "--mw must be between 0 and --mb");
}

TEST(Options, StagesAndMicroBatchesMustBePositive) {
  expect_error(options("1f1b", 0, 8), "--stages must be at least 1");
  expect_error(options("1f1b", 4, 0), "--microbatches must be at least 1");
}
