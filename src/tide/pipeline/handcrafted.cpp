// Hand-written schedule orders: GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-H2, ZB-V.
#include <algorithm>

#include "tide/core/error.h"
#include "tide/pipeline/generators.h"
#include "tide/pipeline/greedy.h"

namespace tide::pipeline {

namespace {

Schedule finish(Schedule s) {
  add_communication(s);
  validate(s);
  return s;
}

void check_shape(const char* name, int p, int m) {
  TIDE_CHECK(p >= 1 && m >= 1, "{}: stages ({}) and micro-batches ({}) must be at least 1", name, p,
             m);
}

}  // namespace

Schedule gpipe(int p, int m) {
  check_shape("gpipe", p, m);
  Schedule s = make_schedule("gpipe", p, m);
  s.split_backward = false;
  for (int st = 0; st < p; ++st) {
    for (int mb = 0; mb < m; ++mb) s.actions[st].push_back(F(mb));
    for (int mb = 0; mb < m; ++mb) {
      s.actions[st].push_back(B(mb));
      s.actions[st].push_back(W(mb));
    }
  }
  return finish(std::move(s));
}

// 1F1B with W right after its B (the un-split backward). `deferred` = how many W stage `st`
// holds back in the steady phase (0 for 1F1B, st for ZB-H1): those run at the very end, where the
// stage would otherwise wait for the last gradients of upper stages.
static void one_f_one_b_stage(Schedule& s, int st, int deferred) {
  const int p = s.stages, m = s.microbatches;
  const int warmup = std::min(p - 1 - st, m);
  auto& a = s.actions[st];
  int next_w = 0, held = 0;
  auto backward = [&](int mb) {
    a.push_back(B(mb));
    if (held < deferred) {
      ++held;  // this W waits; the stage runs the oldest pending W instead later
    } else {
      a.push_back(W(next_w++));
    }
  };
  for (int mb = 0; mb < warmup; ++mb) a.push_back(F(mb));
  for (int i = 0; i + warmup < m; ++i) {
    a.push_back(F(i + warmup));
    backward(i);
  }
  for (int i = m - warmup; i < m; ++i) backward(i);
  while (next_w < m) a.push_back(W(next_w++));
}

Schedule one_f_one_b(int p, int m) {
  check_shape("1f1b", p, m);
  Schedule s = make_schedule("1f1b", p, m);
  s.split_backward = false;
  for (int st = 0; st < p; ++st) one_f_one_b_stage(s, st, 0);
  return finish(std::move(s));
}

Schedule zb_h1(int p, int m) {
  check_shape("zb-h1", p, m);
  Schedule s = make_schedule("zb-h1", p, m);
  // Stage i defers i W: its first B come i steps earlier than 1F1B's B+W would, so the first
  // gradient reaches stage 0 after (p-1) T_B instead of (p-1)(T_B+T_W), and the held W fill the
  // tail. Micro-batches in flight stay at most p on every stage (p-1-i warm-up F, one more, and
  // i awaiting W), so the peak is 1F1B's p M_B.
  for (int st = 0; st < p; ++st) one_f_one_b_stage(s, st, st);
  return finish(std::move(s));
}

Schedule zb_h2(int p, int m) {
  check_shape("zb-h2", p, m);
  // ZB-H2 is the order the greedy rules produce for the ideal case the paper draws it in
  // (T_F = T_B = T_W, no link latency) with 2p-1 micro-batches in flight allowed: stage i runs
  // 2(p-1-i)+1 F before its first B, and W fill every gap, which turns the 1F1B trapezoid into a
  // parallelogram. The order is fixed; the simulator then times it under any real costs.
  CostModel unit;  // T = 1, T_comm = 0, M_B = M_W = 1 (a pending W counts as a whole micro-batch)
  GreedyPolicy policy;
  policy.memory_limit = 2 * p - 1;
  policy.w_gaps = WGaps::Any;
  policy.f_ahead = false;
  Schedule s = greedy_order("zb-h2", p, m, unit, policy);
  return finish(std::move(s));
}

Schedule interleaved_1f1b(int p, int m, int v) {
  check_shape("interleaved", p, m);
  TIDE_CHECK(v >= 2, "interleaved: needs at least 2 chunks per stage, got {}; use 1f1b for one", v);
  TIDE_CHECK(m % p == 0,
             "interleaved: micro-batches ({}) must be a multiple of stages ({}), "
             "because micro-batches go through the chunks in groups of p; use --microbatches {}",
             m, p, (m + p - 1) / p * p);
  Schedule s = make_schedule("interleaved", p, m, v, Placement::Looped);
  s.split_backward = false;
  const int total = m * v;
  // Megatron's order: groups of p micro-batches go through chunk 0, then chunk 1, ...; backward
  // visits the chunks in reverse.
  auto fwd = [&](int k) {
    const int group = k / (p * v), within = k % (p * v);
    return F(group * p + within % p, within / p);
  };
  auto bwd = [&](int k) {
    const int group = k / (p * v), within = k % (p * v);
    return std::pair{group * p + within % p, v - 1 - within / p};
  };
  for (int st = 0; st < p; ++st) {
    auto& a = s.actions[st];
    // Warm-up: enough F so that the first B of the last chunk can be fed without stalling.
    const int warmup = std::min(total, (p - st - 1) * 2 + (v - 1) * p);
    for (int k = 0; k < warmup; ++k) a.push_back(fwd(k));
    for (int k = 0; k < total; ++k) {
      if (k + warmup < total) a.push_back(fwd(k + warmup));
      auto [mb, chunk] = bwd(k);
      a.push_back(B(mb, chunk));
      a.push_back(W(mb, chunk));
    }
  }
  return finish(std::move(s));
}

Schedule zb_v(int p, int m) {
  check_shape("zb-v", p, m);
  // Stage r holds chunk 0 = virtual stage r and chunk 1 = virtual stage 2p-1-r. The order needs
  // at least 2p-1 micro-batches to reach its steady phase; with fewer, it is built for 2p-1 and
  // the actions of the missing micro-batches are dropped (the steady pattern then has holes).
  const int n = std::max(m, 2 * p - 1);
  Schedule s = make_schedule("zb-v", p, m, 2, Placement::V);
  for (int r = 0; r < p; ++r) {
    std::vector<Action> a;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0, w0 = 0, w1 = 0;
    auto f_0 = [&] { a.push_back(F(f0++, 0)); };
    auto f_1 = [&] { a.push_back(F(f1++, 1)); };
    auto bw_0 = [&] {
      a.push_back(B(b0, 0));
      a.push_back(W(b0++, 0));
      w0 = b0;
    };
    auto bw_1 = [&] {
      a.push_back(B(b1, 1));
      a.push_back(W(b1++, 1));
      w1 = b1;
    };
    // Warm-up: fill the V. Stage r's chunk-0 F reach the bottom and turn back up, so the first
    // chunk-1 gradient can start on the last stage after p chunk-F: 2(p-r)-1 chunk-0 F first,
    // then r pairs (chunk-1 F, chunk-0 F), then p-r rounds of (chunk-1 F, B, W).
    for (int i = 0; i < 2 * (p - r) - 1; ++i) f_0();
    for (int i = 0; i < r; ++i) {
      f_1();
      f_0();
    }
    for (int i = 0; i < p - r; ++i) {
      f_1();
      bw_1();
    }
    // Steady: F, B, W of chunk 0 then of chunk 1; 2p chunk activations stay in flight = p M_B.
    while (f1 < f0 || f0 < n) {
      if (f0 < n) f_0();
      bw_0();
      f_1();
      bw_1();
    }
    // Cool-down: B first (they unblock lower stages), the W they leave behind fill the tail.
    for (int i = 0; i < r; ++i) {
      a.push_back(B(b0++, 0));
      a.push_back(B(b1++, 1));
    }
    for (int i = 0; i < p - r; ++i) {
      a.push_back(B(b0++, 0));
      a.push_back(W(w0++, 0));
    }
    while (w1 < b1) a.push_back(W(w1++, 1));
    while (w0 < b0) a.push_back(W(w0++, 0));
    TIDE_ASSERT(f0 == n && f1 == n && b0 == n && b1 == n && w0 == n && w1 == n);
    for (const Action& x : a)
      if (x.mb < m) s.actions[r].push_back(x);
  }
  return finish(std::move(s));
}

}  // namespace tide::pipeline
