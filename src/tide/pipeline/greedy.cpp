// Greedy list scheduler (see greedy.h): a discrete-event loop over stages in time order.
#include "tide/pipeline/greedy.h"

#include <algorithm>
#include <deque>
#include <limits>

#include "tide/core/error.h"

namespace tide::pipeline {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = 1e-9;
}  // namespace

Schedule greedy_order(std::string name, int p, int m, const CostModel& c, const GreedyPolicy& pol,
                      GreedyStats* stats) {
  TIDE_CHECK(pol.memory_limit + kEps >= c.m_b,
             "memory limit {} is below one micro-batch's activations (M_B = {}); no schedule "
             "fits, raise the limit to at least {}",
             pol.memory_limit, c.m_b, c.m_b);
  Schedule s = make_schedule(std::move(name), p, m);
  // Finish times of F and B per (stage, micro-batch); kInf = not scheduled yet. F and B run in
  // micro-batch order on every stage, so only the next one of each needs checking.
  std::vector<std::vector<double>> fin_f(p, std::vector<double>(m, kInf)), fin_b = fin_f;
  std::vector<int> nf(p, 0), nb(p, 0);
  std::vector<std::deque<int>> pending_w(p);
  std::vector<double> clock(p, 0.0), mem(p, 0.0), wake(p, 0.0);
  std::vector<bool> last_was_b(p, false);
  std::vector<double> first_start(p, -1.0), busy(p, 0.0), peak(p, 0.0);

  auto finished = [&](int st) { return nf[st] == m && nb[st] == m && pending_w[st].empty(); };
  // Arrival time of the input of the next F / B on `st` (kInf: its producer has not run yet).
  auto f_arrival = [&](int st) {
    if (st == 0) return 0.0;
    const double f = fin_f[st - 1][nf[st]];
    return f == kInf ? kInf : f + c.t_comm;
  };
  auto b_arrival = [&](int st) {
    if (st == p - 1) return fin_f[st][nb[st]];  // the loss is local
    const double b = fin_b[st + 1][nb[st]];
    return b == kInf ? kInf : b + c.t_comm;
  };
  // A producer finished something: wake the consumer when it arrives (if that is sooner).
  auto notify = [&](int consumer, double arrival) {
    wake[consumer] = std::min(wake[consumer], std::max(arrival, clock[consumer]));
  };
  auto run = [&](int st, Op op, int mb, double start) {
    const double end = start + op_time(c, op, 1);
    s.actions[st].push_back({op, mb, 0, -1});
    clock[st] = end;
    if (first_start[st] < 0) first_start[st] = start;
    busy[st] += end - start;
    if (op == Op::F) {
      mem[st] += c.m_b;
      peak[st] = std::max(peak[st], mem[st]);
      fin_f[st][mb] = end;
      ++nf[st];
      if (st + 1 < p) notify(st + 1, end + c.t_comm);
      if (st == p - 1) notify(st, end);
    } else if (op == Op::B) {
      mem[st] -= c.m_b - c.m_w;
      fin_b[st][mb] = end;
      ++nb[st];
      pending_w[st].push_back(mb);
      if (st > 0) notify(st - 1, end + c.t_comm);
    } else {
      mem[st] -= c.m_w;
      pending_w[st].pop_front();
    }
  };

  const long max_steps = 16L * p * m + 64;
  for (long step = 0;; ++step) {
    TIDE_ASSERT(step < max_steps);
    int st = -1;
    for (int i = 0; i < p; ++i)
      if (!finished(i) && (st < 0 || wake[i] < wake[st])) st = i;
    if (st < 0) break;
    const double t = wake[st];
    TIDE_ASSERT(t < kInf);  // every unfinished stage asleep = a bug in these rules
    TIDE_ASSERT(t + kEps >= clock[st]);

    const bool f_left = nf[st] < m, b_left = nb[st] < nf[st];
    // Optionally also count micro-batches the way ZB-H1 does: at most p - st between F and B
    // (1F1B's warm-up plus one) and at most p between F and W; reaching the second forces a W.
    const bool mem_ok = mem[st] + c.m_b <= pol.memory_limit + kEps;
    const int waiting_w = static_cast<int>(pending_w[st].size());
    const bool count_full = pol.cap_in_flight_like_1f1b && nf[st] - nb[st] + waiting_w >= p;
    const bool f_fits =
        mem_ok && !count_full && (!pol.cap_in_flight_like_1f1b || nf[st] - nb[st] < p - st);
    const bool f_ok = f_left && f_fits;
    const double rf = f_ok ? f_arrival(st) : kInf;
    const double rb = b_left ? b_arrival(st) : kInf;
    const bool warmup = nb[st] == 0;
    const bool starved_next = st + 1 < p && nf[st] <= nf[st + 1];

    // Which of F and B may run next.
    bool allow_f = f_ok, allow_b = b_left, f_priority = pol.prefer_f;
    if (pol.f_ahead && starved_next && f_ok) {
      allow_b = false;  // stage st+1 has nothing to do until this stage runs one more F
    } else if (warmup) {
      f_priority = false;  // F until the first gradient arrives, then B at once
    } else if (pol.alternate) {
      allow_f = f_ok && last_was_b[st];
      allow_b = b_left && !last_was_b[st];
      if (!allow_f && !allow_b && !(last_was_b[st] && f_left && !f_fits && !pending_w[st].empty()))
        allow_f = f_ok, allow_b = b_left;  // the wanted kind is used up: take the other
    }
    double ready_f = allow_f ? rf : kInf;
    // Warm-up option: an extra F that would still be running when the first B could start delays
    // that B; skip it unless the policy allows.
    if (allow_f && warmup && !pol.warmup_may_delay_b && rb < kInf && rb < t + c.t_f - kEps)
      ready_f = kInf;
    const double ready_b = allow_b ? rb : kInf;
    const bool f_now = ready_f <= t + kEps, b_now = ready_b <= t + kEps;

    if (f_now && (!b_now || f_priority)) {
      run(st, Op::F, nf[st], t);
      last_was_b[st] = false;
    } else if (b_now) {
      run(st, Op::B, nb[st], t);
      last_was_b[st] = true;
    } else if (!pending_w[st].empty()) {
      // Idle otherwise. The next F/B cannot start before its known arrival, and an input not
      // produced yet needs at least its producer's op plus the link, starting no earlier than t.
      double next = std::min(ready_f, ready_b);
      if (allow_f && rf == kInf && f_ok && st > 0) next = std::min(next, t + c.t_f + c.t_comm);
      if (allow_b && rb == kInf && b_left && st < p - 1)
        next = std::min(next, t + c.t_b + c.t_comm);
      const bool mem_blocked = f_left && (!mem_ok || count_full);
      const bool gap_fits = next - clock[st] + kEps >= c.t_w;
      const bool any_gap =
          pol.w_gaps == WGaps::Any || (pol.w_gaps == WGaps::AnyInCooldown && !f_left);
      if (any_gap || mem_blocked || gap_fits || (!f_left && !b_left)) {
        // W starts as soon as the stage is free (the order is all that is recorded; the
        // simulator runs it as early as possible), so it fills [clock, clock + T_W).
        run(st, Op::W, pending_w[st].front(), clock[st]);
        wake[st] = std::max(clock[st], t);
      } else {
        const double known = std::min(ready_f, ready_b);
        wake[st] = known < kInf ? std::max(known, t + kEps) : kInf;
      }
      continue;
    } else {
      const double known = std::min(ready_f, ready_b);
      wake[st] = known < kInf ? std::max(known, t + kEps) : kInf;  // kInf: asleep until notify()
      continue;
    }
    wake[st] = clock[st];
  }
  if (stats) {
    *stats = {};
    for (int st = 0; st < p; ++st) {
      stats->bubble = std::max(stats->bubble, clock[st] - first_start[st] - busy[st]);
      stats->makespan = std::max(stats->makespan, clock[st]);
      stats->peak_memory = std::max(stats->peak_memory, peak[st]);
    }
  }
  return s;
}

}  // namespace tide::pipeline
