// The Tracer and the Chrome-trace writer: spans nest on lane 0, overlapping asynchronous work
// gets lanes of its own, a null tracer records nothing, and the output is JSON that
// chrome://tracing / Perfetto read (checked by parsing it with nlohmann::json).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tide/core/trace.h"

using namespace tide;
using json = nlohmann::json;

TEST(Trace, SpansNestAndAsyncWorkGetsFreeLanes) {
  Tracer t(3);
  {
    const TraceSpan outer(&t, "step", "step", {{"step", 2}});
    { const TraceSpan inner(&t, "forward", "compute", {{"block", 1}, {"mb", 0}}); }
    AsyncTrace a = AsyncTrace::start(&t, "reduce-scatter grads", {{"chunk", 4}});
    AsyncTrace b = AsyncTrace::start(&t, "reduce-scatter grads", {{"chunk", 5}});
    a.finish();
    a.finish();  // a second finish records nothing
    AsyncTrace c = AsyncTrace::start(&t, "all-gather params", {{"chunk", 6}});
    b.finish();
    c.finish();
  }
  const auto& ev = t.events();
  ASSERT_EQ(ev.size(), 5u);
  // Spans are recorded when they end: inner, a, b, c, outer.
  const TraceEvent& inner = ev[0];
  const TraceEvent& outer = ev[4];
  EXPECT_EQ(inner.name, "forward");
  EXPECT_EQ(outer.name, "step");
  EXPECT_EQ(outer.pid, 3);
  EXPECT_EQ(inner.tid, 0);
  EXPECT_GE(inner.ts_us, outer.ts_us);
  EXPECT_LE(inner.ts_us + inner.dur_us, outer.ts_us + outer.dur_us);
  EXPECT_EQ(inner.args, (std::vector<std::pair<std::string, int64_t>>{{"block", 1}, {"mb", 0}}));
  // a and b overlapped: lanes 1 and 2; c started after a finished: lane 1 again.
  EXPECT_EQ(ev[1].tid, 1);
  EXPECT_EQ(ev[1].cat, "comm");
  EXPECT_EQ(ev[2].tid, 2);
  EXPECT_EQ(ev[3].tid, 1);
  EXPECT_EQ(ev[3].name, "all-gather params");
  const std::vector<LaneName> lanes = t.lane_names();
  ASSERT_EQ(lanes.size(), 3u);
  EXPECT_EQ(lanes[0].name, "main");
  EXPECT_EQ(lanes[1].name, "comm 0");
  EXPECT_EQ(lanes[2].name, "comm 1");
}

TEST(Trace, NullTracerRecordsNothing) {
  // Nothing to observe but that it neither crashes nor needs a tracer.
  const TraceSpan s(nullptr, "step", "step", {{"step", 1}});
  AsyncTrace a = AsyncTrace::start(nullptr, "x");
  a.finish();
  AsyncTrace none;
  none.finish();
}

TEST(Trace, ChromeJsonParsesWithEscapedNamesAndJoinsParts) {
  const std::vector<TraceEvent> e0 = {
      {"a \"quoted\"\\name\n", "compute", 0, 0, 10.5, 2.25, {{"block", -3}}}};
  const std::vector<TraceEvent> e1 = {{"b", "comm", 1, 2, 11, 1, {}}};
  const std::vector<LaneName> lanes0 = {{0, 0, "main"}}, procs0 = {{0, 0, "rank 0"}};
  const std::vector<std::string> parts = {chrome_trace_events_json(e0, lanes0, procs0), "",
                                          chrome_trace_events_json(e1)};
  const json j = json::parse(chrome_trace_file(parts));
  const json& ev = j.at("traceEvents");
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].at("ph"), "M");
  EXPECT_EQ(ev[0].at("name"), "process_name");
  EXPECT_EQ(ev[0].at("args").at("name"), "rank 0");
  EXPECT_EQ(ev[1].at("name"), "thread_name");
  EXPECT_EQ(ev[2].at("name"), "a \"quoted\"\\name\n");
  EXPECT_EQ(ev[2].at("ph"), "X");
  EXPECT_DOUBLE_EQ(ev[2].at("ts").get<double>(), 10.5);
  EXPECT_DOUBLE_EQ(ev[2].at("dur").get<double>(), 2.25);
  EXPECT_EQ(ev[2].at("args").at("block"), -3);
  EXPECT_EQ(ev[3].at("pid"), 1);
  EXPECT_EQ(ev[3].at("tid"), 2);
  EXPECT_EQ(j.at("displayTimeUnit"), "ms");
  // An empty trace is still a valid file.
  EXPECT_EQ(json::parse(chrome_trace_json({})).at("traceEvents").size(), 0u);
}
