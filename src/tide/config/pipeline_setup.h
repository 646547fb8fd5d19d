#pragma once
// The pipeline.* keys of a train config: the schedule's canonical name, and the schedule the
// Trainer runs. (Their combinations with the other keys are checked with the config's other
// rules, check_settings.h.)

#include <string>

#include "tide/config/config.h"
#include "tide/pipeline/schedule.h"

namespace tide {

// "interleaved-1f1b" -> "interleaved", "zb_h1" -> "zb-h1", ...; one of
// pipeline::schedule_names(), else an error listing them.
std::string canonical_schedule_name(const std::string& name);

// The schedule of c's pipeline: pipeline.stages stages, gradient_accumulation_steps
// micro-batches (the config checked first: check_settings.h).
pipeline::Schedule make_pipeline_schedule(const TrainConfig& c);

}  // namespace tide
