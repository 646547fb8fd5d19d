// Choosing and checking a schedule by name (shared by `tide schedule` and the benchmarks).
#include <algorithm>
#include <cmath>

#include "tide/core/error.h"
#include "tide/pipeline/generators.h"

namespace tide::pipeline {

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b",  "interleaved", "zb-h1", "zb-h2",
                                                 "zb-1p", "zb-2p", "zb-auto",     "zb-v"};
  return names;
}

void check_options(const ScheduleOptions& o) {
  const auto& names = schedule_names();
  if (std::find(names.begin(), names.end(), o.schedule) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    TIDE_FAIL("unknown schedule '{}'; choose one of: {}", o.schedule, list);
  }
  TIDE_CHECK(o.stages >= 1, "--stages must be at least 1, got {}", o.stages);
  TIDE_CHECK(o.microbatches >= 1, "--microbatches must be at least 1, got {}", o.microbatches);
  const CostModel& c = o.cost;
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  TIDE_CHECK(positive(c.t_f) && positive(c.t_b) && positive(c.t_w),
             "times must be positive: got --tf {} --tb {} --tw {}; give each pass's duration "
             "(any unit, e.g. milliseconds)",
             c.t_f, c.t_b, c.t_w);
  TIDE_CHECK(std::isfinite(c.t_comm) && c.t_comm >= 0, "--tcomm must be zero or positive, got {}",
             c.t_comm);
  TIDE_CHECK(positive(c.m_b), "--mb (activation memory per micro-batch) must be positive, got {}",
             c.m_b);
  TIDE_CHECK(std::isfinite(c.m_w) && c.m_w >= 0 && c.m_w <= c.m_b,
             "--mw must be between 0 and --mb ({}): W keeps part of what B kept, got {}", c.m_b,
             c.m_w);
  TIDE_CHECK(std::isfinite(o.memory_limit) && o.memory_limit >= 0,
             "--memory-limit must be positive (or 0 for none), got {}", o.memory_limit);
  if (o.schedule == "interleaved") {
    TIDE_CHECK(o.chunks >= 2, "interleaved needs --chunks of at least 2, got {}; use 1f1b for one",
               o.chunks);
    TIDE_CHECK(o.microbatches >= o.stages && o.microbatches % o.stages == 0,
               "interleaved needs micro-batches to be a multiple of stages (m >= p), got m = {}, "
               "p = {}; use --microbatches {}",
               o.microbatches, o.stages, (o.microbatches + o.stages - 1) / o.stages * o.stages);
  }
  // Every schedule keeps at least one whole micro-batch's activations on some stage (the last
  // stage holds all its chunks' F until the loss), so a smaller limit fits nothing.
  TIDE_CHECK(o.memory_limit == 0 || o.memory_limit + 1e-9 >= c.m_b,
             "--memory-limit {} is below one micro-batch's activations (--mb {}), so no schedule "
             "fits; raise it to at least {}",
             o.memory_limit, c.m_b, c.m_b);
}

Schedule build_schedule(const ScheduleOptions& o) {
  check_options(o);
  const int p = o.stages, m = o.microbatches;
  const double peak_1f1b = one_f_one_b_peak(p, m, o.cost);
  Schedule s;
  if (o.schedule == "gpipe") s = gpipe(p, m);
  if (o.schedule == "1f1b") s = one_f_one_b(p, m);
  if (o.schedule == "interleaved") s = interleaved_1f1b(p, m, o.chunks);
  if (o.schedule == "zb-h1") s = zb_h1(p, m);
  if (o.schedule == "zb-h2") s = zb_h2(p, m);
  if (o.schedule == "zb-v") s = zb_v(p, m);
  if (o.schedule == "zb-1p") s = zb_auto(p, m, o.cost, peak_1f1b, "zb-1p");
  if (o.schedule == "zb-2p") s = zb_auto(p, m, o.cost, 2 * peak_1f1b, "zb-2p");
  if (o.schedule == "zb-auto")
    s = zb_auto(p, m, o.cost, o.memory_limit > 0 ? o.memory_limit : peak_1f1b, "zb-auto");
  if (o.memory_limit > 0) {
    const double peak = simulate(s, o.cost).peak_memory;
    TIDE_CHECK(peak <= o.memory_limit + 1e-9,
               "schedule {} needs {:.4g} activation memory per stage, above --memory-limit {}; "
               "raise the limit or use zb-auto, which fits any limit of at least --mb",
               o.schedule, peak, o.memory_limit);
  }
  return s;
}

}  // namespace tide::pipeline
