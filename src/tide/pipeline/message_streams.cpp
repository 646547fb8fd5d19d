#include "tide/pipeline/message_streams.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tide/core/error.h"

namespace tide::pipeline {

std::vector<MessageStream> message_streams(const Schedule& s) {
  std::vector<MessageStream> streams;
  const int V = s.virtual_stages();
  for (int grad = 0; grad < 2; ++grad)
    for (int consumer = grad ? 0 : 1; consumer < (grad ? V - 1 : V); ++consumer) {
      const int from = s.locate(grad ? consumer + 1 : consumer - 1).first;
      const int to = s.locate(consumer).first;
      if (from != to) streams.push_back({consumer, grad == 1, from, to});
    }
  return streams;
}

namespace {

// The micro-batches of `stage`'s actions `op` on `chunk` (with `peer` unless -1), in order.
std::vector<int> micro_batches_of(const Schedule& s, int stage, Op op, int chunk, int peer) {
  std::vector<int> mbs;
  for (const Action& a : s.actions[stage])
    if (a.op == op && a.chunk == chunk && (peer < 0 || a.peer == peer)) mbs.push_back(a.mb);
  return mbs;
}

}  // namespace

void check_stream_order(const Schedule& s) {
  for (const MessageStream& m : message_streams(s)) {
    const int sender_chunk = s.locate(m.grad ? m.consumer + 1 : m.consumer - 1).second;
    const int chunk = s.locate(m.consumer).second;
    const char* what = m.grad ? "gradients" : "activations";
    const std::vector<int> sent =
        micro_batches_of(s, m.from, m.grad ? Op::SendGrad : Op::SendAct, sender_chunk, m.to);
    const std::vector<int> forwards = micro_batches_of(s, m.to, Op::F, chunk, -1);
    TIDE_CHECK(sent == forwards,
               "schedule '{}': stage {} sends the {} into virtual stage {} in micro-batch order "
               "[{}] but stage {} posts their receives in the order of its forwards of chunk "
               "{}, [{}]; on a device the messages of one stream match in the order they are "
               "issued (NCCL), so they would be mixed up. Use a schedule that runs each chunk's "
               "F, B and W in micro-batch order (every generator's does), or device=cpu",
               s.name, m.from, what, m.consumer, fmt::join(sent, " "), m.to, chunk,
               fmt::join(forwards, " "));
    if (m.grad) continue;
    const std::vector<int> received = micro_batches_of(s, m.to, Op::RecvAct, chunk, m.from);
    TIDE_CHECK(received == forwards,
               "schedule '{}': stage {} receives the activations into virtual stage {} in "
               "micro-batch order [{}] but runs their forwards in the order [{}]; on a device "
               "the executor posts each stream's receives in one order (NCCL matches them in "
               "issue order): put each RecvAct in the order of the forwards",
               s.name, m.to, m.consumer, fmt::join(received, " "), fmt::join(forwards, " "));
  }
}

}  // namespace tide::pipeline
