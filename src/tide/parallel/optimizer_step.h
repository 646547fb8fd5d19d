#pragma once
// One AdamW step over the parameters this rank updates: all of them, or under ZeRO the owned
// slice of every chunk (f32 training: MASTER is PARAM, so no compute-precision copy is
// written). Weight decay applies only to tensors whose slot says so
// (matrices and embeddings, not biases or norms), hence one fused call per tensor.

#include "tide/memory/chunk_store.h"
#include "tide/optim/adamw.h"

namespace tide {

// `hyper.weight_decay` is the decay of decayed tensors. The gradients must be known finite
// (the caller checks the gradient norm), so the update runs without its own NaN scan.
void adamw_step(ChunkStore& store, const AdamWHyper& hyper, const AdamWStep& step);
// The same step for chunk c alone. `grad`: the gradients of the range updated (the owned slice,
// or the whole chunk), f32, taken from there instead of the store's GRAD (ZeRO-Offload passes
// its host copy); nullptr: the store's. `threads` as AdamWCpuOptions::threads.
void adamw_step_chunk(ChunkStore& store, int c, const float* grad, const AdamWHyper& hyper,
                      const AdamWStep& step, int threads = 0);

}  // namespace tide
