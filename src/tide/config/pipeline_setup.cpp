#include "tide/config/pipeline_setup.h"

#include <algorithm>

#include "tide/core/error.h"
#include "tide/pipeline/generators.h"

namespace tide {

namespace {

std::string schedule_list() {
  std::string list;
  for (const std::string& n : pipeline::schedule_names()) list += (list.empty() ? "" : ", ") + n;
  return list;
}

// Schedules that run more than one model chunk per stage.
bool multi_chunk(const std::string& s) {
  return s == "interleaved" || s == "zb-v";
}

pipeline::ScheduleOptions schedule_options(const TrainConfig& c) {
  pipeline::ScheduleOptions o;
  o.schedule = c.pipeline_schedule;
  o.stages = c.pipeline_stages;
  o.microbatches = c.grad_accum;
  o.chunks = c.virtual_stages;
  o.memory_limit = c.pipeline_memory_limit;  // in M_B: the cost model's m_b is 1
  return o;
}

}  // namespace

std::string canonical_schedule_name(const std::string& name) {
  std::string n = name;
  if (n == "interleaved-1f1b") n = "interleaved";
  std::replace(n.begin(), n.end(), '_', '-');
  const auto& names = pipeline::schedule_names();
  TIDE_CHECK(std::find(names.begin(), names.end(), n) != names.end(),
             "unknown pipeline.schedule '{}'; choose one of: {}", name, schedule_list());
  return n;
}

void check_pipeline_settings(const TrainConfig& c) {
  const int p = c.pipeline_stages, v = c.virtual_stages;
  const std::string& s = c.pipeline_schedule;
  if (p == 1) {
    TIDE_CHECK(v == 1,
               "pipeline.virtual_stages={} needs pipeline.stages > 1 (model chunks are spread "
               "over stages); set pipeline.stages, or virtual_stages to 1",
               v);
    return;
  }
  TIDE_CHECK(multi_chunk(s) || v == 1,
             "pipeline.virtual_stages={}: the {} schedule runs one model chunk per stage; set "
             "pipeline.virtual_stages to 1, or use pipeline.schedule=interleaved (or zb-v) for "
             "several",
             v, s);
  TIDE_CHECK(s != "interleaved" || v >= 2,
             "pipeline.schedule=interleaved needs pipeline.virtual_stages >= 2 (got {}); with one "
             "model chunk per stage use 1f1b",
             v);
  TIDE_CHECK(s != "zb-v" || v == 2,
             "pipeline.schedule=zb-v runs exactly two model chunks per stage (a V); set "
             "pipeline.virtual_stages to 2 or leave it out (got {})",
             v);
  TIDE_CHECK(c.model.n_layer % (p * v) == 0,
             "model.n_layer ({}) is not divisible by pipeline.stages x pipeline.virtual_stages = "
             "{} x {} = {}: every model chunk holds the same number of layers; change one of them",
             c.model.n_layer, p, v, p * v);
  TIDE_CHECK(s != "interleaved" || c.grad_accum % p == 0,
             "pipeline.schedule=interleaved needs gradient_accumulation_steps (the micro-batches "
             "per step, {}) to be a multiple of pipeline.stages ({}): micro-batches go through "
             "the chunks in groups of p; use gradient_accumulation_steps={}",
             c.grad_accum, p, (c.grad_accum + p - 1) / p * p);
  TIDE_CHECK(c.pipeline_memory_limit == 0 || c.pipeline_memory_limit >= 1,
             "pipeline.memory_limit={} is below one micro-batch's activations (1 M_B), so no "
             "schedule fits; raise it to at least 1, or 0 for the schedule's default",
             c.pipeline_memory_limit);
  try {
    make_pipeline_schedule(c);
  } catch (const Error& e) {
    TIDE_FAIL("pipeline.schedule={} with pipeline.stages={}, gradient_accumulation_steps={}{}: {}",
              s, p, c.grad_accum,
              c.pipeline_memory_limit > 0
                  ? fmt::format(", pipeline.memory_limit={}", c.pipeline_memory_limit)
                  : "",
              e.what());
  }
}

pipeline::Schedule make_pipeline_schedule(const TrainConfig& c) {
  return pipeline::build_schedule(schedule_options(c));
}

}  // namespace tide
