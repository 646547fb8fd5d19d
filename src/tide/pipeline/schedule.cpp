// Schedule representation: communication insertion and validation (see schedule.h).
#include "tide/pipeline/schedule.h"

#include <fmt/format.h>

#include <deque>
#include <map>
#include <tuple>

#include "tide/core/error.h"

namespace tide::pipeline {

bool is_compute(Op op) {
  return op == Op::F || op == Op::B || op == Op::W;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::F:
      return "F";
    case Op::B:
      return "B";
    case Op::W:
      return "W";
    case Op::SendAct:
      return "send-act";
    case Op::RecvAct:
      return "recv-act";
    case Op::SendGrad:
      return "send-grad";
    case Op::RecvGrad:
      return "recv-grad";
    case Op::OptimizerStep:
      return "optimizer-step";
  }
  return "?";
}

std::string to_string(const Action& a) {
  switch (a.op) {
    case Op::F:
    case Op::B:
    case Op::W:
      return fmt::format("{}(mb {}, chunk {})", op_name(a.op), a.mb, a.chunk);
    case Op::SendAct:
    case Op::SendGrad:
      return fmt::format("{}(mb {}, chunk {}) to stage {}", op_name(a.op), a.mb, a.chunk, a.peer);
    case Op::RecvAct:
    case Op::RecvGrad:
      return fmt::format("{}(mb {}, chunk {}) from stage {}", op_name(a.op), a.mb, a.chunk, a.peer);
    case Op::OptimizerStep:
      return "optimizer-step";
  }
  return "?";
}

int Schedule::virtual_stage(int stage, int chunk) const {
  if (placement == Placement::V) return chunk == 0 ? stage : 2 * stages - 1 - stage;
  return chunk * stages + stage;
}

std::pair<int, int> Schedule::locate(int v) const {
  if (placement == Placement::V)
    return v < stages ? std::pair{v, 0} : std::pair{2 * stages - 1 - v, 1};
  return {v % stages, v / stages};
}

Schedule make_schedule(std::string name, int stages, int microbatches, int chunks,
                       Placement placement) {
  Schedule s;
  s.name = std::move(name);
  s.stages = stages;
  s.microbatches = microbatches;
  s.chunks = chunks;
  s.placement = placement;
  s.actions.assign(stages, {});
  return s;
}

namespace {

// A message is named by what it carries: (is_grad, micro-batch, virtual stage that produced it).
using MsgKey = std::tuple<bool, int, int>;

// The message a compute action needs from another stage, if any: returns false when the input
// is local (first virtual stage, the loss, or the neighbouring chunk on the same stage).
bool needed_message(const Schedule& s, int stage, const Action& a, MsgKey* key, int* from_stage) {
  const int v = s.virtual_stage(stage, a.chunk);
  int src_v = -1;
  if (a.op == Op::F && v > 0) src_v = v - 1;
  if (a.op == Op::B && v < s.virtual_stages() - 1) src_v = v + 1;
  if (src_v < 0) return false;
  const int src_stage = s.locate(src_v).first;
  if (src_stage == stage) return false;
  *key = {a.op == Op::B, a.mb, src_v};
  *from_stage = src_stage;
  return true;
}

// The message a compute action produces for another stage, if any.
bool produced_message(const Schedule& s, int stage, const Action& a, MsgKey* key, int* to_stage) {
  const int v = s.virtual_stage(stage, a.chunk);
  int dst_v = -1;
  if (a.op == Op::F && v < s.virtual_stages() - 1) dst_v = v + 1;
  if (a.op == Op::B && v > 0) dst_v = v - 1;
  if (dst_v < 0) return false;
  const int dst_stage = s.locate(dst_v).first;
  if (dst_stage == stage) return false;
  *key = {a.op == Op::B, a.mb, v};
  *to_stage = dst_stage;
  return true;
}

// Message key of a send/recv action on `stage`.
MsgKey comm_key(const Schedule& s, int stage, const Action& a) {
  const int v = s.virtual_stage(stage, a.chunk);
  switch (a.op) {
    case Op::SendAct:
      return {false, a.mb, v};
    case Op::SendGrad:
      return {true, a.mb, v};
    case Op::RecvAct:
      return {false, a.mb, v - 1};
    case Op::RecvGrad:
      return {true, a.mb, v + 1};
    default:
      TIDE_ASSERT(false);
  }
  return {};
}

std::string key_string(const MsgKey& k) {
  return fmt::format("{}(mb {}, from virtual stage {})", std::get<0>(k) ? "grad" : "act",
                     std::get<1>(k), std::get<2>(k));
}

}  // namespace

void add_communication(Schedule& s) {
  // Pass 1: what each stage sends to each peer, in send order.
  std::map<std::pair<int, int>, std::deque<MsgKey>> channel;  // (src, dst) -> keys in order
  for (int st = 0; st < s.stages; ++st) {
    for (const Action& a : s.actions[st]) {
      MsgKey key;
      int to;
      if (is_compute(a.op) && produced_message(s, st, a, &key, &to))
        channel[{st, to}].push_back(key);
    }
  }
  // Pass 2: rebuild each stage's list with recvs before consumers and sends after producers.
  for (int st = 0; st < s.stages; ++st) {
    std::vector<Action> out;
    std::map<MsgKey, bool> received;
    for (const Action& a : s.actions[st]) {
      if (!is_compute(a.op)) continue;  // regenerated below
      MsgKey need;
      int from;
      if (needed_message(s, st, a, &need, &from) && !received.count(need)) {
        auto& q = channel[{from, st}];
        bool found = false;
        while (!q.empty() && !found) {
          const MsgKey k = q.front();
          q.pop_front();
          const bool grad = std::get<0>(k);
          // The consuming chunk is the one holding the next virtual stage (act) or previous (grad).
          const int chunk = s.locate(std::get<2>(k) + (grad ? -1 : 1)).second;
          out.push_back({grad ? Op::RecvGrad : Op::RecvAct, std::get<1>(k), chunk, from});
          received[k] = true;
          found = (k == need);
        }
        // No matching send exists: emit the recv anyway so that validate() names the problem.
        if (!found)
          out.push_back({a.op == Op::B ? Op::RecvGrad : Op::RecvAct, a.mb, a.chunk, from});
      }
      out.push_back(a);
      MsgKey made;
      int to;
      // Un-split backward: the gradient leaves after the W that completes the backward call.
      const Action producer = !s.split_backward && a.op == Op::W ? B(a.mb, a.chunk) : a;
      const bool sends = s.split_backward || a.op != Op::B;
      if (sends && produced_message(s, st, producer, &made, &to))
        out.push_back({producer.op == Op::B ? Op::SendGrad : Op::SendAct, a.mb, a.chunk, to});
    }
    out.push_back({Op::OptimizerStep, 0, 0, -1});
    s.actions[st] = std::move(out);
  }
}

void validate(const Schedule& s) {
  const std::string who = fmt::format("schedule '{}'", s.name);
  TIDE_CHECK(s.stages >= 1 && s.microbatches >= 1 && s.chunks >= 1,
             "{}: stages ({}), micro-batches ({}) and chunks ({}) must all be at least 1", who,
             s.stages, s.microbatches, s.chunks);
  TIDE_CHECK(s.placement != Placement::V || s.chunks == 2,
             "{}: the V placement needs exactly 2 chunks per stage, got {}", who, s.chunks);
  TIDE_CHECK(static_cast<int>(s.actions.size()) == s.stages,
             "{}: has action lists for {} stages but declares {} stages", who, s.actions.size(),
             s.stages);
  const int m = s.microbatches, v = s.chunks;
  auto idx = [&](int mb, int c) { return mb * v + c; };

  for (int st = 0; st < s.stages; ++st) {
    const auto& list = s.actions[st];
    // Position of each compute action in the list (-1 = missing).
    std::vector<int> pos[3];
    for (auto& p : pos) p.assign(m * v, -1);
    std::map<MsgKey, int> recv_pos;
    int optimizer_steps = 0;
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      TIDE_CHECK(a.mb >= 0 && a.mb < m && a.chunk >= 0 && a.chunk < v,
                 "{}: stage {} action #{} {} is out of range (micro-batches 0..{}, chunks 0..{})",
                 who, st, i, to_string(a), m - 1, v - 1);
      const bool comm = !is_compute(a.op) && a.op != Op::OptimizerStep;
      TIDE_CHECK(comm ? (a.peer >= 0 && a.peer < s.stages && a.peer != st) : a.peer == -1,
                 "{}: stage {} action #{} {} has peer {}; send/recv need another stage in "
                 "0..{}, compute and optimizer actions need peer -1",
                 who, st, i, to_string(a), a.peer, s.stages - 1);
      if (is_compute(a.op)) {
        int& p = pos[static_cast<int>(a.op)][idx(a.mb, a.chunk)];
        TIDE_CHECK(p < 0,
                   "{}: stage {} runs {} twice (actions #{} and #{}); every stage needs "
                   "exactly one F, B and W per micro-batch and chunk",
                   who, st, to_string(a), p, i);
        p = i;
      } else if (a.op == Op::RecvAct || a.op == Op::RecvGrad) {
        recv_pos[comm_key(s, st, a)] = i;
      } else if (a.op == Op::OptimizerStep) {
        ++optimizer_steps;
        TIDE_CHECK(i == static_cast<int>(list.size()) - 1,
                   "{}: stage {} has its optimizer step at action #{} of {}; it must be last, "
                   "after every W",
                   who, st, i, list.size());
      }
    }
    TIDE_CHECK(optimizer_steps == 1,
               "{}: stage {} has {} optimizer steps; it needs exactly one, "
               "as its last action (add_communication() appends it)",
               who, st, optimizer_steps);
    for (int mb = 0; mb < m; ++mb) {
      for (int c = 0; c < v; ++c) {
        const int f = pos[0][idx(mb, c)], b = pos[1][idx(mb, c)], w = pos[2][idx(mb, c)];
        for (int k = 0; k < 3; ++k) {
          TIDE_CHECK(pos[k][idx(mb, c)] >= 0,
                     "{}: stage {} never runs {}(mb {}, chunk {}); every "
                     "stage needs exactly one F, B and W per micro-batch and chunk",
                     who, st, op_name(static_cast<Op>(k)), mb, c);
        }
        TIDE_CHECK(f < b && b < w,
                   "{}: stage {} runs F, B, W of (mb {}, chunk {}) at actions "
                   "#{}, #{}, #{}; they must come in the order F < B < W",
                   who, st, mb, c, f, b, w);
        TIDE_CHECK(s.split_backward || w == b + 1,
                   "{}: stage {} runs B(mb {}, chunk {}) at "
                   "action #{} and its W at #{}; without a split backward W must follow B "
                   "directly",
                   who, st, mb, c, b, w);
        // Inputs: from the neighbouring chunk on this stage (earlier in the list) or a recv.
        for (Op op : {Op::F, Op::B}) {
          const Action a{op, mb, c, -1};
          const int at = op == Op::F ? f : b;
          MsgKey key;
          int from;
          if (needed_message(s, st, a, &key, &from)) {
            auto it = recv_pos.find(key);
            TIDE_CHECK(it != recv_pos.end() && it->second < at,
                       "{}: stage {} runs {} at action #{} without first receiving {} from stage "
                       "{}; put the recv before it (add_communication() does this)",
                       who, st, to_string(a), at, key_string(key), from);
          } else {
            const int vs = s.virtual_stage(st, c);
            const bool first = op == Op::F && vs == 0;
            const bool loss = op == Op::B && vs == s.virtual_stages() - 1;
            if (!first && !loss) {
              const int dep_chunk = s.locate(op == Op::F ? vs - 1 : vs + 1).second;
              const int dep = pos[static_cast<int>(op)][idx(mb, dep_chunk)];
              TIDE_CHECK(dep >= 0 && dep < at,
                         "{}: stage {} runs {} at action #{} before "
                         "{}(mb {}, chunk {}) that it depends on",
                         who, st, to_string(a), at, op_name(op), mb, dep_chunk);
            }
          }
        }
      }
    }
    // Sends: after the compute that makes the tensor, to the stage that holds the consumer.
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      if (a.op != Op::SendAct && a.op != Op::SendGrad) continue;
      const Op producer = a.op == Op::SendAct ? Op::F : Op::B;
      MsgKey key;
      int to;
      const bool crosses = produced_message(s, st, {producer, a.mb, a.chunk, -1}, &key, &to);
      TIDE_CHECK(crosses && to == a.peer,
                 "{}: stage {} action #{} {} goes to the wrong stage; "
                 "the consumer of this tensor is on stage {}",
                 who, st, i, to_string(a), crosses ? to : st);
      // Un-split backward: the gradient exists only when the whole backward (B+W) is done.
      const Op last = !s.split_backward && producer == Op::B ? Op::W : producer;
      TIDE_CHECK(pos[static_cast<int>(last)][idx(a.mb, a.chunk)] < i,
                 "{}: stage {} sends {} at action #{} before computing it{}", who, st, to_string(a),
                 i, last == producer ? "" : " (B and W are one backward call)");
    }
  }

  // Every message is sent once and received once, in the same order on each ordered pair.
  std::map<std::pair<int, int>, std::vector<MsgKey>> sent, recvd;
  for (int st = 0; st < s.stages; ++st) {
    for (const Action& a : s.actions[st]) {
      if (a.op == Op::SendAct || a.op == Op::SendGrad)
        sent[{st, a.peer}].push_back(comm_key(s, st, a));
      if (a.op == Op::RecvAct || a.op == Op::RecvGrad)
        recvd[{a.peer, st}].push_back(comm_key(s, st, a));
    }
  }
  for (int src = 0; src < s.stages; ++src) {
    for (int dst = 0; dst < s.stages; ++dst) {
      const auto& snd = sent[{src, dst}];
      const auto& rcv = recvd[{src, dst}];
      const size_t n = std::min(snd.size(), rcv.size());
      for (size_t k = 0; k < n; ++k) {
        TIDE_CHECK(snd[k] == rcv[k],
                   "{}: message #{} from stage {} to stage {} is sent as {} but "
                   "received as {}; receives must follow the sender's order",
                   who, k, src, dst, key_string(snd[k]), key_string(rcv[k]));
      }
      TIDE_CHECK(snd.size() == rcv.size(),
                 "{}: stage {} sends {} messages to stage {} which "
                 "receives {}; every send needs exactly one recv",
                 who, src, snd.size(), dst, rcv.size());
    }
  }

  // Deadlock: walk all stages with eager sends and blocking recvs until nobody can move.
  std::vector<size_t> at(s.stages, 0);
  std::map<std::pair<int, int>, size_t> n_sent, n_recvd;
  for (bool progress = true; progress;) {
    progress = false;
    for (int st = 0; st < s.stages; ++st) {
      const auto& list = s.actions[st];
      while (at[st] < list.size()) {
        const Action& a = list[at[st]];
        if (a.op == Op::RecvAct || a.op == Op::RecvGrad) {
          auto ch = std::pair{a.peer, st};
          if (n_sent[ch] <= n_recvd[ch]) break;
          ++n_recvd[ch];
        } else if (a.op == Op::SendAct || a.op == Op::SendGrad) {
          ++n_sent[{st, a.peer}];
        }
        ++at[st];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int st = 0; st < s.stages; ++st) {
    if (at[st] < s.actions[st].size())
      stuck += fmt::format("{}stage {} waits at action #{} {}", stuck.empty() ? "" : "; ", st,
                           at[st], to_string(s.actions[st][at[st]]));
  }
  TIDE_CHECK(stuck.empty(),
             "{}: deadlock with blocking receives: {}; reorder the receives so "
             "that each one's sender can get there first",
             who, stuck);
}

std::string compute_order(const Schedule& s, int stage) {
  std::string out;
  for (const Action& a : s.actions[stage]) {
    if (!is_compute(a.op)) continue;
    std::string name = op_name(a.op);
    if (a.chunk == 1 && s.chunks == 2) name[0] = static_cast<char>(name[0] - 'A' + 'a');
    if (!out.empty()) out += ' ';
    out += s.chunks > 2 ? fmt::format("{}{}.{}", name, a.mb, a.chunk)
                        : fmt::format("{}{}", name, a.mb);
  }
  return out;
}

}  // namespace tide::pipeline
