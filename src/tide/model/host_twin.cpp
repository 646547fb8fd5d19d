#include "tide/model/host_twin.h"

#include "tide/kernels/mover.h"

namespace tide {

std::unique_ptr<GPT> host_copy(const GPT& model) {
  if (model.op().device.is_cpu()) return nullptr;
  const ChunkLayout& lay = model.store().layout();
  ModelOptions mo;
  mo.chunk_elems = lay.target_elems();
  mo.group_size = lay.group_size();    // the same padding of each chunk
  mo.store = model.store().options();  // the same dtypes and ZeRO slices, in host memory
  mo.store.compute = mo.store.optimizer = mo.store.param_slices = mo.store.master = nullptr;
  mo.store.placed_kinds = 0;  // allocated now (the model's placement put its own chunks)
  mo.pp = model.pp();
  mo.stage = model.stage();
  mo.tp = model.tp_group_ptr();        // the same shards (nothing is communicated: no step runs)
  mo.kv_group = model.kv_group_ptr();  // (given: no split of the tp group)
  mo.sequence_parallel = model.sequence_parallel();
  auto twin = std::make_unique<GPT>(model.config(), model.policy(), mo);
  TIDE_ASSERT(twin->store().layout().num_chunks() == lay.num_chunks());
  copy_chunks(model.op(), model.store(), twin->store());
  return twin;
}

void with_host_chunks(GPT& model, const std::function<void(GPT&)>& fn) {
  const std::unique_ptr<GPT> twin = host_copy(model);
  if (!twin) return fn(model);
  fn(*twin);
  copy_chunks(model.op(), twin->store(), model.store());
}

}  // namespace tide
