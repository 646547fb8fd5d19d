// Timelines: ASCII, SVG and Chrome trace of a simulated schedule.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tide/pipeline/generators.h"
#include "tide/pipeline/timeline.h"

using namespace tide::pipeline;

namespace {
int count(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}
}  // namespace

TEST(Timeline, ChromeTraceHasOneCompleteEventPerPass) {
  const Schedule s = zb_h1(4, 8);
  CostModel c;
  const SimResult r = simulate(s, c);
  const auto j = nlohmann::json::parse(chrome_trace(s, r));
  int x_events = 0;
  for (const auto& e : j.at("traceEvents")) {
    EXPECT_EQ(e.at("pid"), 0);
    if (e.at("ph") != "X") continue;
    ++x_events;
    const int tid = e.at("tid");
    EXPECT_GE(tid, 0);
    EXPECT_LT(tid, 4);
    EXPECT_GT(e.at("dur").get<double>(), 0.0);
  }
  EXPECT_EQ(x_events, 3 * 4 * 8);
  // The first event of stage 3 is F0 at 3 time units = 3000 us.
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "X" && e.at("tid") == 3) {
      EXPECT_EQ(e.at("name"), "F0");
      EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), 3000.0);
      break;
    }
  }
}

TEST(Timeline, SvgHasARowPerStageAndABoxPerPass) {
  const Schedule s = one_f_one_b(3, 4);
  const std::string svg = svg_timeline(s, simulate(s, CostModel{}));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<rect"), 3 * 3 * 4);
  for (int st = 0; st < 3; ++st)
    EXPECT_NE(svg.find(">stage " + std::to_string(st) + "<"), std::string::npos);
  EXPECT_EQ(count(svg, "fill=\"#4e79a7\""), 3 * 4);  // F boxes
}

TEST(Timeline, AsciiDrawsEveryStageToScale) {
  const Schedule s = one_f_one_b(2, 2);
  const SimResult r = simulate(s, CostModel{});
  // Makespan 9 (6 busy + 3 bubble) in 36 characters = 4 per time unit. Stage 0 waits 2 units for
  // stage 1's B0+W0 and 1 unit for its B1+W1 (the un-split backward sends after W); stage 1
  // starts after one F and ends 2 units early.
  const std::string a = ascii_timeline(s, r, 36);
  EXPECT_NE(a.find("stage  0 |F0  F1  ........B0  W0  ....B1  W1  |"), std::string::npos) << a;
  EXPECT_NE(a.find("stage  1 |....F0  B0  W0  F1  B1  W1  ........|"), std::string::npos) << a;
  EXPECT_EQ(count(a, "\nstage"), 2);
  // The default width gives the shortest pass four characters.
  EXPECT_EQ(ascii_timeline(s, r), a);
}

TEST(Timeline, SummaryNamesTheBubble) {
  const Schedule s = one_f_one_b(4, 8);
  const std::string t = summary_table(s, simulate(s, CostModel{}));
  EXPECT_NE(t.find("makespan 33, bubble 9 (27.27% of the longest stage span)"), std::string::npos)
      << t;
}
