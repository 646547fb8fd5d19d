#include "tide/config/unsupported_settings.h"

#include "tide/core/error.h"

namespace tide {

void check_trainer_can_honour(const TrainConfig& c, int world_size) {
  TIDE_CHECK(c.world_size == 0 || c.world_size == world_size,
             "world_size={}: this run has {} rank{} (launch it with `mpirun -np {}`), or set "
             "world_size to 0 (= the ranks launched)",
             c.world_size, world_size, world_size == 1 ? "" : "s", c.world_size);
  // Tensor parallelism: t ranks per stage of each data-parallel replica (the mesh tp x dp x
  // pp, comm/topology.h).
  const int t = c.tensor_parallel;
  TIDE_CHECK(world_size % t == 0,
             "tensor_parallel.size={}: this run has {} rank{}, not a multiple of it (ranks = "
             "tensor_parallel.size x pipeline.stages x data-parallel replicas); launch `mpirun "
             "-np {}` or change tensor_parallel.size",
             t, world_size, world_size == 1 ? "" : "s", (world_size + t - 1) / t * t);
  // Pipeline parallelism: one stage per rank. (The pipeline.* combinations are checked with
  // the config, pipeline_setup.h; what depends on the ranks launched is checked here.)
  const int p = c.pipeline_stages;
  TIDE_CHECK(world_size % p == 0,
             "pipeline.stages={}: this run has {} rank{}, not a multiple of the stages (each "
             "stage runs on world/stages ranks); launch `mpirun -np {}` or change pipeline.stages",
             p, world_size, world_size == 1 ? "" : "s", (world_size + p - 1) / p * p);
  TIDE_CHECK(world_size % (p * t) == 0,
             "pipeline.stages={} x tensor_parallel.size={}: this run has {} ranks, not a "
             "multiple of {} (each data-parallel replica holds stages x tp ranks); launch "
             "`mpirun -np {}` or change one of them",
             p, t, world_size, p * t, (world_size + p * t - 1) / (p * t) * (p * t));
  // A device (the simulated one, or a GPU) runs every technique: data, tensor and pipeline
  // parallelism move their device buffers over NCCL there (the simulated device's stand-in on
  // sim), pipeline stages each message stream over its own group (exec/pipeline_engine.h).
  TIDE_CHECK(c.optimizer_type == "AdamW",
             "optimizer.type=\"{}\": tide train has only Adam and AdamW; set optimizer.type to "
             "\"AdamW\" (tide estimate sizes SGD)",
             c.optimizer_type);
}

}  // namespace tide
