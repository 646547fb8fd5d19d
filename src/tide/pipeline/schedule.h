#pragma once
// A pipeline schedule is data: for every stage (one rank of the pipeline) the ordered list of
// what it does in one training step. An executor walks each stage's list front to back; the
// simulator times the same lists under a cost model; the timelines draw them.
//
// Actions:
//   F(mb, chunk)  forward of micro-batch mb through the stage's model chunk
//   B(mb, chunk)  backward for the input gradient only (on the critical path)
//   W(mb, chunk)  backward for the weight gradient (may be deferred to fill bubbles)
//   SendAct / RecvAct    activation of (mb) leaving / entering a chunk, with the peer stage
//   SendGrad / RecvGrad  input gradient of (mb) going back / arriving, with the peer stage
//   OptimizerStep        last action of every stage
//
// Chunks: with v chunks per stage the model is cut into p*v "virtual stages" (consecutive layer
// groups). `Placement` says which virtual stage each (stage, chunk) holds:
//   Looped (GPipe, 1F1B, ZB-H*, interleaved): virtual = chunk*p + stage
//     (v = 1 is the plain pipeline; v > 1 is Megatron's interleaved layout)
//   V (ZB-V, v = 2): chunk 0 holds virtual `stage`, chunk 1 holds virtual 2p-1-stage, so a
//     micro-batch goes down the stages and comes back up, and stage 0 owns the loss.
//
// Communication semantics (what `validate` checks and the simulator times): a send is eager
// (posted and the stage moves on, like a buffered isend); a recv blocks until its message has
// arrived. Messages between one ordered pair of stages must be received in the order they were
// sent, so an executor may match them FIFO (as NCCL point-to-point does) without tags.

#include <string>
#include <utility>
#include <vector>

namespace tide::pipeline {

enum class Op { F, B, W, SendAct, RecvAct, SendGrad, RecvGrad, OptimizerStep };

enum class Placement { Looped, V };

struct Action {
  Op op = Op::F;
  int mb = 0;     // micro-batch
  int chunk = 0;  // model chunk on this stage (for send/recv: the chunk producing/consuming it)
  int peer = -1;  // other stage for send/recv, -1 for compute and the optimizer step

  bool operator==(const Action&) const = default;
};

bool is_compute(Op op);                  // F, B or W
const char* op_name(Op op);              // "F", "B", "W", "send-act", ...
std::string to_string(const Action& a);  // e.g. "F(mb 3, chunk 0)", "recv-act(mb 3) from stage 1"

inline Action F(int mb, int chunk = 0) {
  return {Op::F, mb, chunk, -1};
}
inline Action B(int mb, int chunk = 0) {
  return {Op::B, mb, chunk, -1};
}
inline Action W(int mb, int chunk = 0) {
  return {Op::W, mb, chunk, -1};
}

struct Schedule {
  std::string name;
  int stages = 0;
  int microbatches = 0;
  int chunks = 1;  // model chunks per stage
  Placement placement = Placement::Looped;
  // false: the backward is not split (GPipe, 1F1B, interleaved as usually run). Every B is
  // immediately followed by its W, and the input gradient is sent only after the W: the executor
  // runs B+W as one backward call, so W sits on the critical path between stages.
  bool split_backward = true;
  std::vector<std::vector<Action>> actions;  // [stage] -> ordered actions

  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int stage, int chunk) const;
  std::pair<int, int> locate(int virtual_stage) const;  // -> (stage, chunk)
};

// An empty schedule of the given shape: `actions` has one empty list per stage.
Schedule make_schedule(std::string name, int stages, int microbatches, int chunks = 1,
                       Placement placement = Placement::Looped);

// Generators write only compute actions (F, B, W) per stage; this inserts the send/recv pairs
// implied by the placement and appends the optimizer step. A send goes right after the compute
// that produces its tensor (after the W for a gradient when split_backward is false). A recv goes
// right before the compute that needs it, preceded by any earlier-sent message from the same peer
// not yet received (FIFO order per peer): those arrive no later than the one needed, so receiving
// them first never delays the stage.
void add_communication(Schedule& s);

// Checks everything an executor relies on and throws tide::Error naming the first problem:
// shape and ranges, exactly one F, B and W per (micro-batch, chunk) on every stage in the order
// F < B < W, dependencies between chunks (local order or a matching recv), every send matched by
// one recv in the same per-peer order, W right after B when the backward is not split, one
// optimizer step at the end, and no deadlock when sends are eager and recvs block.
void validate(const Schedule& s);

// Compute actions only, as a compact string per stage ("F0 F1 B0 W0 ..."; chunk 1 lower-case).
std::string compute_order(const Schedule& s, int stage);

}  // namespace tide::pipeline
