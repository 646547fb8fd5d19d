#pragma once
// The pipeline.* keys of a train config, checked and turned into the schedule the Trainer
// runs. Why a file of its own: the checks need the model shape, the batch and ZeRO together,
// and they must fire at config time (before the Trainer writes anything), with the key names
// the user wrote rather than `tide schedule`'s flag names.

#include <string>

#include "tide/config/config.h"
#include "tide/pipeline/schedule.h"

namespace tide {

// "interleaved-1f1b" -> "interleaved", "zb_h1" -> "zb-h1", ...; one of
// pipeline::schedule_names(), else an error listing them.
std::string canonical_schedule_name(const std::string& name);

// Every pipeline.* combination the trainer cannot run, each a one-line error naming the key
// and the fix: layers not divisible by stages x virtual stages, virtual stages with a
// one-chunk schedule (or too few with interleaved / zb-v), interleaved's micro-batches
// (gradient_accumulation_steps) not a multiple of the stages, and whatever the schedule
// generator refuses (a memory limit nothing fits). With pipeline.stages = 1 only
// virtual_stages is checked (one stage runs every schedule the same).
void check_pipeline_settings(const TrainConfig& c);

// The schedule of c's pipeline: pipeline.stages stages, gradient_accumulation_steps
// micro-batches (check_pipeline_settings first).
pipeline::Schedule make_pipeline_schedule(const TrainConfig& c);

}  // namespace tide
