#include "tide/train/optimizer_step.h"

#include "tide/optim/adamw_cpu.h"

namespace tide {

void adamw_step(ChunkStore& store, const AdamWHyper& hyper, const AdamWStep& step) {
  const ChunkLayout& lay = store.layout();
  AdamWCpuOptions opt;
  opt.check = FiniteCheck::kCheckedByCaller;
  for (int id = 0; id < lay.num_tensors(); ++id) {
    AdamWHyper h = hyper;
    if (!lay.slot(id).decay) h.weight_decay = 0.0;
    AdamWChunk c;
    c.master = store.tensor(ChunkKind::MASTER, id).f32();
    c.grad = store.tensor(ChunkKind::GRAD, id).data;
    c.grad_dtype = DType::F32;
    c.m = store.tensor(ChunkKind::ADAM_M, id).f32();
    c.v = store.tensor(ChunkKind::ADAM_V, id).f32();
    c.n = lay.slot(id).numel;
    (void)adamw_cpu(c, h, step, opt);
  }
}

}  // namespace tide
