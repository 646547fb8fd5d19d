#pragma once
// One AdamW step over the parameters this rank updates: all of them, or under ZeRO the owned
// slice of every chunk. It reads the gradients in the store's compute dtype (f32, bf16 or f16)
// and updates the f32 MASTER; when MASTER has chunks of its own (16-bit compute) the same pass
// writes the compute-precision PARAM, rounded to nearest even (with f32 compute MASTER is PARAM
// and nothing else is written). Weight decay applies only to tensors whose slot says so
// (matrices and embeddings, not biases or norms), hence one fused call per tensor.

#include "tide/kernels/ops.h"
#include "tide/memory/chunk_store.h"
#include "tide/optim/adamw.h"

namespace tide {

// `hyper.weight_decay` is the decay of decayed tensors. The gradients must be known finite
// (the caller checks the gradient norm), so the update runs without its own NaN scan.
// It runs on `op`'s device, where the store's optimizer kinds and gradients must be: at once on
// the CPU, queued on the stream of a simulated device, as CUDA kernels on a GPU.
void adamw_step(const OpContext& op, ChunkStore& store, const AdamWHyper& hyper,
                const AdamWStep& step);
// The same step for chunk c alone. `grad`: the gradients of the range updated (the owned slice,
// or the whole chunk), f32, taken from there instead of the store's GRAD (ZeRO-Offload passes
// its host copy, and copies its master into PARAM itself: PARAM is not written then);
// nullptr: the store's. `threads` as AdamWCpuOptions::threads.
void adamw_step_chunk(const OpContext& op, ChunkStore& store, int c, const float* grad,
                      const AdamWHyper& hyper, const AdamWStep& step, int threads = 0);

}  // namespace tide
