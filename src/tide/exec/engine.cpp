#include "tide/exec/engine.h"

#include "tide/comm/local_process_group.h"

namespace tide {

pipeline::Schedule data_parallel_schedule(int micro_batches, bool split_backward) {
  pipeline::Schedule s = pipeline::make_schedule("data-parallel", 1, micro_batches);
  s.split_backward = split_backward;
  for (int m = 0; m < micro_batches; ++m) {
    s.actions[0].push_back(pipeline::F(m));
    s.actions[0].push_back(pipeline::B(m));
    s.actions[0].push_back(pipeline::W(m));
  }
  pipeline::add_communication(s);
  return s;
}

namespace {
pipeline::Schedule one_stage(pipeline::Schedule s) {
  pipeline::validate(s);
  TIDE_CHECK(s.stages == 1 && s.chunks == 1,
             "the engine runs one-stage schedules; '{}' has {} stages x {} chunks (the pipeline "
             "executor runs the others)",
             s.name, s.stages, s.chunks);
  return s;
}
}  // namespace

Engine::Engine(GPT& model, std::shared_ptr<ProcessGroup> dp, pipeline::Schedule schedule, int B,
               int T, OptimizerSettings optimizer, ZeroSettings zero,
               AutoPlacementSettings placement)
    : PipelineEngine(model, std::make_shared<LocalProcessGroup>(), one_stage(std::move(schedule)),
                     B, T, optimizer, std::move(dp), zero, placement) {
  set_post_validation(false);
}

}  // namespace tide
