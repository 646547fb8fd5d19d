#pragma once
// Model states per rank: parameters, gradients and optimizer states, and how ZeRO-DP
// partitions them (Rajbhandari et al., "ZeRO", SC20, section 5 and Table 1).
//
// With Psi parameters, mixed precision and Adam, every parameter costs 2 bytes (param16) +
// 2 bytes (grad16) + K = 12 bytes (fp32 master, momentum, variance). Over Nd data-parallel
// ranks, per rank:
//   stage 0 (DDP)  (2 + 2 + K) Psi
//   stage 1 (Pos)  2 Psi + 2 Psi + K Psi / Nd
//   stage 2 (Pos+g) 2 Psi + (2 + K) Psi / Nd
//   stage 3 (Pos+g+p) (2 + 2 + K) Psi / Nd
// A partition holds ceil(Psi / Nd) elements (the last rank's share is padded).
// zero_model_states() is this formula, exact; the estimate itself allocates chunks
// (chunked_model_states()), which the tests hold against the formula.

#include <cstdint>
#include <optional>

#include "tide/estimate/train_setup.h"
#include "tide/memory/chunk_layout.h"

namespace tide {

// Bytes of each kind of model state; "param16" is the compute-precision copy (4 bytes per
// parameter in fp32 training, where there is no separate master copy).
struct ModelStateBytes {
  int64_t param16 = 0;
  int64_t grads = 0;
  int64_t master = 0;
  int64_t adam_m = 0;
  int64_t adam_v = 0;
  int64_t optimizer_bytes() const { return master + adam_m + adam_v; }  // ZeRO's K per param
  int64_t total() const { return param16 + grads + optimizer_bytes(); }
};

// Bytes per parameter of each kind (the unpartitioned Psi = 1 case).
// `grads`: the gradients' precision where it differs (data_types.grad_accum_dtype).
ModelStateBytes bytes_per_parameter(Precision precision, Optimizer optimizer,
                                    std::optional<Precision> grads = std::nullopt);

// ZeRO's per-rank model-state bytes for psi parameters at the given stage and DP degree,
// partitions exact (no chunks). This is the function ZeRO's Table 1 tabulates.
ModelStateBytes zero_model_states(int64_t psi, int zero_stage, int dp, Precision precision,
                                  Optimizer optimizer,
                                  std::optional<Precision> grads = std::nullopt);

// The facts of one stage's chunk layout that the estimate reports. The layout is the runtime's
// own: make_layout() (model/layout.h) gives the tensors of the stage's rank, and
// ChunkLayout::pack(target, Nd) sizes each chunk to its payload rounded up to 16 Nd elements
// and slices every chunk across the Nd data-parallel ranks (rank r owns slice r); a tensor
// larger than the target gets a chunk of its own.
struct ChunkPlan {
  int64_t target_elems = 0;         // the target chunk size packed to (0 asked: the largest tensor)
  int64_t chunks = 0;               // number of chunks
  int64_t largest_chunk_elems = 0;  // the largest chunk
  int64_t total_elems = 0;          // elements of all chunks (parameters + alignment padding)
  int64_t owned_elems = 0;          // one rank's slices of every chunk: total_elems / Nd
  int64_t payload_elems = 0;        // parameters (the stage's Psi)
};
ChunkPlan chunk_plan(const ChunkLayout& layout);

// Bytes of each kind of model state that one rank allocates for a packed layout, as the chunk
// store allocates them: a kind that ZeRO partitions at `zero_stage` holds the rank's slice of
// every chunk (sum of slice_elems(c) = total_elems / Nd elements), any other kind every chunk
// whole (total_elems); each chunk (or slice) is one allocation rounded up to 64 bytes. Bytes
// per element come from bytes_per_parameter (no master copy in fp32: it is the parameters).
// This is ZeRO's Table 1 with chunks; it exceeds zero_model_states(Psi) by the chunk padding.
ModelStateBytes chunked_model_states(const ChunkLayout& layout, int zero_stage, Precision precision,
                                     Optimizer optimizer,
                                     std::optional<Precision> grads = std::nullopt);

}  // namespace tide
