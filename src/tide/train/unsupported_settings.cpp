#include "tide/train/unsupported_settings.h"

#include "tide/core/error.h"

namespace tide {

void check_trainer_can_honour(const TrainConfig& c, int world_size) {
  TIDE_CHECK(c.world_size == 0 || c.world_size == world_size,
             "world_size={}: this run has {} rank{} (launch it with `mpirun -np {}`), or set "
             "world_size to 0 (= the ranks launched)",
             c.world_size, world_size, world_size == 1 ? "" : "s", c.world_size);
  TIDE_CHECK(c.tensor_parallel == 1,
             "parallel.tp={}: tensor parallelism is not implemented in tide train yet (issue "
             "#12); set it to 1 (tide estimate sizes tp > 1)",
             c.tensor_parallel);
  TIDE_CHECK(!c.sequence_parallel,
             "parallel.sp=true: sequence parallelism is not implemented in tide train yet (issue "
             "#12); set it to false");
  TIDE_CHECK(c.pipeline_stages == 1,
             "parallel.pp={}: pipeline parallelism is not implemented in tide train yet (issue "
             "#13); set it to 1 (tide estimate sizes pp > 1)",
             c.pipeline_stages);
  // With one stage every schedule runs the same steps, so pipeline.schedule is honoured; more
  // than one model chunk per stage needs stages.
  TIDE_CHECK(c.virtual_stages == 1,
             "pipeline.virtual_stages={}: model chunks per stage need pipeline parallelism, which "
             "tide train does not have yet (issue #13); set it to 1",
             c.virtual_stages);
  TIDE_CHECK(c.offload_optimizer == "none",
             "zero_optimization.offload_optimizer.device=\"{}\": tide train does not offload "
             "yet (issue #15); set it to \"none\" (tide estimate sizes offload)",
             c.offload_optimizer);
  TIDE_CHECK(c.offload_param == "none",
             "zero_optimization.offload_param.device=\"{}\": tide train does not offload yet "
             "(issue #15); set it to \"none\"",
             c.offload_param);
  TIDE_CHECK(c.optimizer_type == "AdamW",
             "optimizer.type=\"{}\": tide train has only AdamW; set optimizer.type to \"AdamW\" "
             "(tide estimate sizes SGD)",
             c.optimizer_type);
}

}  // namespace tide
