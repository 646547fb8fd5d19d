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

pipeline::Schedule make_pipeline_schedule(const TrainConfig& c) {
  return pipeline::build_schedule(schedule_options(c));
}

}  // namespace tide
