#pragma once
// A pipeline's message streams: the activations into one virtual stage, or the gradients into
// one, each between two stages (where both ends are on one stage it is a copy, no message).
//
// Why: where the messages between two ranks match in the order they were issued, without tags
// (NCCL's point-to-point calls, and the simulated device's stand-in), and each call holds its
// communication stream until the peer's has matched it, one group for all of a pipeline's
// messages deadlocks (a stage's send queued behind its own receive, whose peer's send is queued
// behind that peer's receive) and mixes up messages whose receives are posted in another order
// than they were sent (ZB-V's activations and gradients share a direction). So on a device the
// executor gives each stream its own group of its two ranks (pipeline_engine.h): a stage only
// sends or only receives on it, in micro-batch order, which check_stream_order holds.

#include <vector>

#include "tide/pipeline/schedule.h"

namespace tide::pipeline {

struct MessageStream {
  int consumer = 0;      // the virtual stage receiving the messages
  bool grad = false;     // input gradients from virtual stage consumer + 1, else activations from
                         // consumer - 1
  int from = 0, to = 0;  // the sending and the receiving stage (different)
};

// Every stream between two different stages, in one order (the same on every stage): the
// activations into virtual stages 1..V-1, then the gradients into 0..V-2.
std::vector<MessageStream> message_streams(const Schedule& s);

// Throws a tide::Error naming the first stream whose messages are not sent in the order the
// executor posts their receives. It posts them in the receiving stage's order of the consumer
// chunk's forwards: an activation's receive before its F (at its RecvAct action, or earlier for
// the next F), a gradient's right after its F. So each stream's sends must come in that order,
// and the RecvAct actions too. Every generator's schedules pass (each chunk's F, B and W run in
// micro-batch order).
void check_stream_order(const Schedule& s);

}  // namespace tide::pipeline
