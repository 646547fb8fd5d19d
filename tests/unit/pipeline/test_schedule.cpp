// The schedule representation: communication insertion and validation errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "tide/core/error.h"
#include "tide/pipeline/generators.h"

using namespace tide;
using namespace tide::pipeline;

namespace {

// Expects validate(s) to throw with `needle` in the message.
void expect_invalid(const Schedule& s, const std::string& needle) {
  try {
    validate(s);
    FAIL() << "validate() accepted an invalid schedule; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Two stages, one micro-batch, plain F B W on each, then the communication.
Schedule tiny() {
  Schedule s = make_schedule("tiny", 2, 1);
  s.actions[0] = {F(0), B(0), W(0)};
  s.actions[1] = {F(0), B(0), W(0)};
  add_communication(s);
  return s;
}

}  // namespace

TEST(Schedule, CommunicationIsInsertedWhereTheExecutorNeedsIt) {
  const Schedule s = tiny();
  // Stage 0: F0, send its activation to stage 1, wait for the gradient, B0, W0, step.
  const std::vector<Action> want0 = {
      F(0), {Op::SendAct, 0, 0, 1},       {Op::RecvGrad, 0, 0, 1}, B(0),
      W(0), {Op::OptimizerStep, 0, 0, -1}};
  const std::vector<Action> want1 = {{Op::RecvAct, 0, 0, 0},  F(0), B(0),
                                     {Op::SendGrad, 0, 0, 0}, W(0), {Op::OptimizerStep, 0, 0, -1}};
  EXPECT_EQ(s.actions[0], want0);
  EXPECT_EQ(s.actions[1], want1);
  EXPECT_NO_THROW(validate(s));
}

TEST(Schedule, UnsplitBackwardSendsTheGradientAfterW) {
  const Schedule s = one_f_one_b(2, 1);
  const std::vector<Action> want1 = {
      {Op::RecvAct, 0, 0, 0},       F(0), B(0), W(0), {Op::SendGrad, 0, 0, 0},
      {Op::OptimizerStep, 0, 0, -1}};
  EXPECT_EQ(s.actions[1], want1);
}

TEST(Schedule, VPlacementTurnsAtTheLastStage) {
  const Schedule s = zb_v(2, 3);
  EXPECT_EQ(s.virtual_stage(0, 0), 0);
  EXPECT_EQ(s.virtual_stage(1, 0), 1);
  EXPECT_EQ(s.virtual_stage(1, 1), 2);
  EXPECT_EQ(s.virtual_stage(0, 1), 3);
  for (int v = 0; v < 4; ++v) {
    auto [st, c] = s.locate(v);
    EXPECT_EQ(s.virtual_stage(st, c), v);
  }
  // Stage 1 runs chunk 1 right after chunk 0 without any message in between: the turn is local.
  for (const Action& a : s.actions[1])
    if (a.op == Op::RecvAct) EXPECT_EQ(a.chunk, 0) << to_string(a);
}

TEST(Schedule, EveryGeneratorProducesAValidSchedule) {
  for (int p : {1, 2, 3, 5}) {
    for (int m : {1, 2, p, 2 * p + 1}) {
      EXPECT_NO_THROW(validate(gpipe(p, m)));
      EXPECT_NO_THROW(validate(one_f_one_b(p, m)));
      EXPECT_NO_THROW(validate(zb_h1(p, m)));
      EXPECT_NO_THROW(validate(zb_h2(p, m)));
      EXPECT_NO_THROW(validate(zb_v(p, m)));
      CostModel c;
      EXPECT_NO_THROW(validate(zb_auto(p, m, c, p * c.m_b)));
    }
    EXPECT_NO_THROW(validate(interleaved_1f1b(p, 2 * p, 2)));
    EXPECT_NO_THROW(validate(interleaved_1f1b(p, p, 3)));
  }
}

TEST(Schedule, MissingWIsRejected) {
  Schedule s = tiny();
  s.actions[1].erase(s.actions[1].begin() + 4);  // W(0)
  expect_invalid(s, "stage 1 never runs W(mb 0, chunk 0)");
}

TEST(Schedule, BBeforeFIsRejected) {
  Schedule s = make_schedule("bad", 1, 1);
  s.actions[0] = {B(0), F(0), W(0)};
  add_communication(s);
  expect_invalid(s, "must come in the order F < B < W");
}

TEST(Schedule, DuplicateActionIsRejected) {
  Schedule s = make_schedule("bad", 1, 2);
  s.actions[0] = {F(0), F(0), B(0), W(0)};
  add_communication(s);
  expect_invalid(s, "runs F(mb 0, chunk 0) twice");
}

TEST(Schedule, ComputeWithoutItsRecvIsRejected) {
  Schedule s = tiny();
  s.actions[1].erase(s.actions[1].begin());  // recv-act before F(0)
  expect_invalid(s, "without first receiving act(mb 0");
}

TEST(Schedule, SendBeforeComputeIsRejected) {
  Schedule s = tiny();
  std::swap(s.actions[0][0], s.actions[0][1]);  // send-act before F(0)
  expect_invalid(s, "before computing it");
}

TEST(Schedule, ReceivesOutOfSendOrderAreRejected) {
  Schedule s = make_schedule("order", 2, 2);
  s.actions[0] = {F(0), F(1), B(0), W(0), B(1), W(1)};
  s.actions[1] = {F(0), B(0), W(0), F(1), B(1), W(1)};
  add_communication(s);
  // Move stage 1's recv-act of micro-batch 1 to the front: it now receives 1 before 0.
  auto& list = s.actions[1];
  const Action late{Op::RecvAct, 1, 0, 0};
  list.erase(std::find(list.begin(), list.end(), late));
  list.insert(list.begin(), late);
  expect_invalid(s, "receives must follow the sender's order");
}

TEST(Schedule, DeadlockIsDetected) {
  // Stage 0 waits for the gradient before it sends the activation the gradient depends on.
  Schedule s = make_schedule("deadlock", 2, 1);
  s.actions[0] = {F(0), {Op::RecvGrad, 0, 0, 1},      {Op::SendAct, 0, 0, 1}, B(0),
                  W(0), {Op::OptimizerStep, 0, 0, -1}};
  s.actions[1] = {{Op::RecvAct, 0, 0, 0},  F(0), B(0),
                  {Op::SendGrad, 0, 0, 0}, W(0), {Op::OptimizerStep, 0, 0, -1}};
  expect_invalid(s, "deadlock with blocking receives: stage 0 waits at action #1 recv-grad");
}

TEST(Schedule, OptimizerStepMustBeLast) {
  Schedule s = tiny();
  std::swap(s.actions[0][4], s.actions[0][5]);
  expect_invalid(s, "optimizer step at action #4");
}

TEST(Schedule, UnsplitBackwardNeedsWRightAfterB) {
  Schedule s = make_schedule("unsplit", 1, 2);
  s.split_backward = false;
  s.actions[0] = {F(0), F(1), B(0), B(1), W(0), W(1)};
  add_communication(s);
  expect_invalid(s, "W must follow B directly");
}

TEST(Schedule, ComputeOrderIsReadable) {
  EXPECT_EQ(compute_order(one_f_one_b(2, 3), 0), "F0 F1 B0 W0 F2 B1 W1 B2 W2");
  EXPECT_EQ(compute_order(zb_v(1, 1), 0), "F0 f0 b0 w0 B0 W0");
}
