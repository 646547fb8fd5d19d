#pragma once
// Per-tensor sums of squares of a chunk's gradients, over the part of each tensor that one
// buffer holds (the whole chunk, or this rank's ZeRO slice of it).
//
// Why: the executor adds the global gradient norm per tensor (under tensor parallelism a
// replicated tensor counted once, a tp-sharded one summed over the tp ranks; under pipeline
// parallelism in whole-model tensor order, whatever stage holds the tensor), so each rank needs
// its sum of squares per tensor, not per chunk. The policy stack (policy_stack.h) takes them
// from the store's gradients; ZeRO-Offload (offload_policy.h) from its host copies of the same
// slices, during backward. Both call this one function over the same element ranges, so their
// sums are bitwise the same.

#include <cstdint>
#include <span>

#include "tide/core/tensor.h"
#include "tide/kernels/ops.h"
#include "tide/memory/chunk_layout.h"

namespace tide {

// `g` holds elements [begin, begin + n) of chunk `chunk`, n = g.numel(), in f32, bf16 or f16:
// the whole chunk (begin 0, n = chunk_elems) or rank r's slice (begin r * slice_elems, n =
// slice_elems). For every tensor id of that chunk, out[id] = the sum of squares (grad_norm.h,
// in double: a 16-bit value widens and squares exactly) of the tensor's counted elements
// (the first TensorSlot::norm_numel: all but replicated copies) inside [begin, begin + n), 0
// when none are. out: one entry per tensor of the layout; entries of
// other chunks are left as they are. threads = 0: OpenMP's default (the sums do not depend on
// it).
void tensor_grad_sums(const ChunkLayout& layout, int chunk, const Tensor& g, int64_t begin,
                      std::span<double> out, int threads = 0);

// The same sums where `g` is, queued on `op`'s stream: `out` is a device buffer of
// layout.num_tensors() doubles (entries of other chunks left as they are), `scratch` at least
// tensor_grad_scratch_doubles(layout) device doubles. On the simulated device the CPU function
// above runs on the stream (`layout` must outlive it: wait before it goes); on a GPU
// grad_norm_squared_cuda, the same bits. The host reads `out` after a copy and a wait.
void tensor_grad_sums(const OpContext& op, const ChunkLayout& layout, int chunk, const Tensor& g,
                      int64_t begin, double* out, double* scratch);
int64_t tensor_grad_scratch_doubles(const ChunkLayout& layout);

}  // namespace tide
