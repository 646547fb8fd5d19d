// The message streams a device's pipeline gives each their own group (pipeline/message_streams.h)
// and the order check their untagged, issue-order matching needs.
#include <gtest/gtest.h>

#include <string>

#include "tide/core/error.h"
#include "tide/pipeline/generators.h"
#include "tide/pipeline/message_streams.h"

using namespace tide;
using namespace tide::pipeline;

TEST(MessageStreams, OneStreamPerDirectionOfEachBoundaryBetweenTwoStages) {
  // Looped, one chunk: the activations into stages 1..3, the gradients into 0..2.
  const std::vector<MessageStream> looped = message_streams(one_f_one_b(4, 8));
  ASSERT_EQ(looped.size(), 6u);
  EXPECT_FALSE(looped[0].grad);
  EXPECT_EQ(looped[0].consumer, 1);
  EXPECT_EQ(looped[0].from, 0);
  EXPECT_EQ(looped[0].to, 1);
  EXPECT_TRUE(looped[3].grad);
  EXPECT_EQ(looped[3].consumer, 0);
  EXPECT_EQ(looped[3].from, 1);
  EXPECT_EQ(looped[3].to, 0);
  // ZB-V: virtual stages 3 and 4 are both on stage 3 (a copy, no stream); stage 1 sends stage 0
  // both the activations into virtual stage 7 and the gradients into virtual stage 0.
  const std::vector<MessageStream> v = message_streams(zb_v(4, 8));
  EXPECT_EQ(v.size(), 12u);
  int from1to0 = 0;
  for (const MessageStream& m : v) {
    EXPECT_NE(m.from, m.to);
    from1to0 += m.from == 1 && m.to == 0;
  }
  EXPECT_EQ(from1to0, 2);
  // Interleaved with two chunks: every boundary between virtual stages 0..7 is a message.
  EXPECT_EQ(message_streams(interleaved_1f1b(4, 8, 2)).size(), 14u);
}

TEST(MessageStreams, EveryGeneratorsSchedulesSendEachStreamInItsReceivesOrder) {
  for (const std::string& name : schedule_names())
    for (int p : {2, 3, 4})
      for (int m : {p, 2 * p, 3 * p}) {
        ScheduleOptions o;
        o.schedule = name;
        o.stages = p;
        o.microbatches = m;
        EXPECT_NO_THROW(check_stream_order(build_schedule(o))) << name << " p=" << p << " m=" << m;
      }
}

TEST(MessageStreams, AStageRunningItsForwardsOutOfOrderIsRefusedNamingTheStream) {
  // Stage 1 runs micro-batch 1 first; stage 0 sent micro-batch 0 first.
  Schedule s = make_schedule("swapped", 2, 2);
  s.actions[0] = {F(0), F(1), B(0), W(0), B(1), W(1)};
  s.actions[1] = {F(1), F(0), B(1), W(1), B(0), W(0)};
  add_communication(s);
  try {
    check_stream_order(s);
    FAIL() << "an out-of-order stream was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stage 0 sends the activations into virtual stage 1 in micro-batch order "
                        "[0 1] but stage 1 posts their receives in the order of its forwards of "
                        "chunk 0, [1 0]"),
              std::string::npos)
        << what;
  }
}
