// Discrete-event simulator for pipeline schedules (see simulator.h for the model).
#include "tide/pipeline/simulator.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "tide/core/error.h"

namespace tide::pipeline {

double op_time(const CostModel& c, Op op, int chunks) {
  switch (op) {
    case Op::F:
      return c.t_f / chunks;
    case Op::B:
      return c.t_b / chunks;
    case Op::W:
      return c.t_w / chunks;
    default:
      return 0.0;
  }
}

SimResult simulate(const Schedule& s, const CostModel& cost) {
  return simulate(s, std::vector<CostModel>(std::max(s.stages, 0), cost));
}

SimResult simulate(const Schedule& s, const std::vector<CostModel>& stage_costs) {
  validate(s);
  const int p = s.stages;
  TIDE_CHECK(static_cast<int>(stage_costs.size()) == p,
             "simulate: {} cost models for schedule '{}' with {} stages; give one per stage",
             stage_costs.size(), s.name, p);

  SimResult r;
  r.timeline.assign(p, {});
  r.stages.assign(p, {});
  std::vector<size_t> at(p, 0);
  std::vector<double> clock(p, 0.0), mem(p, 0.0);
  // Per ordered pair of stages, the send times in order; recvs consume them FIFO (validate()
  // guarantees the orders match).
  std::map<std::pair<int, int>, std::vector<double>> sent;
  std::map<std::pair<int, int>, size_t> received;

  // Each pass advances every stage as far as it can; a stage stops at a recv whose message has
  // not been sent yet. validate() proved this terminates.
  for (bool progress = true; progress;) {
    progress = false;
    for (int st = 0; st < p; ++st) {
      const auto& list = s.actions[st];
      while (at[st] < list.size()) {
        const Action& a = list[at[st]];
        if (a.op == Op::RecvAct || a.op == Op::RecvGrad) {
          const auto ch = std::pair{a.peer, st};
          const auto& times = sent[ch];
          size_t& k = received[ch];
          if (k >= times.size()) break;
          // The message's latency is the sender's link.
          clock[st] = std::max(clock[st], times[k] + stage_costs[a.peer].t_comm);
          ++k;
        } else if (a.op == Op::SendAct || a.op == Op::SendGrad) {
          sent[{st, a.peer}].push_back(clock[st]);
        } else if (is_compute(a.op)) {
          const CostModel& cost = stage_costs[st];
          const double mb_mem = cost.m_b / s.chunks, mw_mem = cost.m_w / s.chunks;
          const double start = clock[st], end = start + op_time(cost, a.op, s.chunks);
          StageStats& ss = r.stages[st];
          if (r.timeline[st].empty()) ss.start = start;
          ss.end = end;
          ss.busy += end - start;
          if (a.op == Op::F) {
            mem[st] += mb_mem;
            ss.peak_memory = std::max(ss.peak_memory, mem[st]);
          } else if (a.op == Op::B) {
            mem[st] -= mb_mem - mw_mem;
          } else {
            mem[st] -= mw_mem;
          }
          r.timeline[st].push_back({a, start, end});
          clock[st] = end;
        }
        ++at[st];
        progress = true;
      }
    }
  }
  for (int st = 0; st < p; ++st) TIDE_ASSERT(at[st] == s.actions[st].size());

  for (StageStats& ss : r.stages) {
    const double span = ss.end - ss.start;
    ss.bubble = std::max(0.0, span - ss.busy);
    ss.bubble_rate = span > 0 ? ss.bubble / span : 0.0;
    r.makespan = std::max(r.makespan, ss.end);
    r.bubble = std::max(r.bubble, ss.bubble);
    r.bubble_rate = std::max(r.bubble_rate, ss.bubble_rate);
    r.peak_memory = std::max(r.peak_memory, ss.peak_memory);
  }
  return r;
}

}  // namespace tide::pipeline
