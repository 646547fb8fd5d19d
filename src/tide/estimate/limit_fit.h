#pragma once
// placement.device_memory_limit and placement.policy=auto in the estimate.
//
// Why: a user sizing a run against a device budget, or an auto run (PatrickStar's automatic
// chunk placement, parallel/auto_placement.h), needs the figures the runtime will meet, not those
// of a run that keeps every state on the device.
//
// With a limit and placement=device, the per-GPU total is held against it: over the limit is
// what tide train fails on at its first allocation past it. With placement=auto (no
// offload; each rank's own shards under tp; under pp each stage's rank within the same limit,
// the stage needing the most shown):
//   states     = model states + chunk padding (the chunk store's bytes, every kind)
//   non_model  = activations + temp buffers (ZeRO's buffers, recompute workspace) + the arenas'
//                reserve beyond them, as estimated: on a GPU every arena is allocated whole
//                from the same memory before the first step (on the CPU only the bytes in
//                use count against the budget, so there the least is an upper figure)
//   on device  = min(states, limit - non_model) (0 when the limit is under non_model); the rest
//                of the states is on the host: with a pageable host tier auto keeps every
//                chunk item in one place; with placement.pin_memory on a device the host's
//                memory is counted as all the states (a move to the device leaves its
//                page-locked host memory cached for the chunk's return: the host keeps memory
//                for every chunk that has been there)
//   least      = non_model + the chunks of the access that needs the most (an op acquires one
//                parameter group, model/param_groups.h: F and B need the group's PARAM chunks
//                as this rank holds them, W its GRAD chunks; at ZeRO-3 on 2+ ranks F and B
//                read the gathered buffers instead, already non-model)
//   moved      = states - (limit - non_model), 0 when everything fits: the least that must move
//                each way per step (tests/mpi/train_auto_placement.cpp's "least")
// A limit under `least` does not fit: auto fails at the first access whose chunks cannot fit.

#include <cstdint>

#include "tide/estimate/train_setup.h"
#include "tide/memory/chunk_layout.h"

namespace tide {

struct LimitFit {
  int64_t limit = 0;  // placement.device_memory_limit; 0: no limit (nothing else is set)
  bool auto_placement = false;
  int64_t device_total = 0;  // per-GPU total with every state on the device (policy=device)
  bool device_fits = true;   // device_total <= limit
  // placement=auto only:
  int64_t states = 0;            // model states + chunk padding
  int64_t non_model = 0;         // activations + temp buffers + arenas
  int64_t states_on_device = 0;  // min(states, limit - non_model), >= 0
  int64_t states_on_host = 0;    // states - states_on_device
  int64_t largest_group = 0;     // chunk bytes of the group access that needs the most
  int64_t least_limit = 0;       // non_model + largest_group
  int64_t least_moved = 0;       // bytes moved each way per step at the least
  bool auto_fits = true;         // limit >= least_limit

  int64_t margin() const { return limit - device_total; }  // negative: over the limit
  bool fits() const { return auto_placement ? auto_fits : device_fits; }
};

// Bytes of the chunks that one group access of `layout` needs on the compute tier, the largest
// over the groups (see above): F/B the group's PARAM chunks, W its GRAD chunks, each chunk as
// this rank allocates it (a ZeRO slice or the whole chunk, rounded to 64 bytes).
int64_t largest_group_chunk_bytes(const TrainSetup& setup, const ChunkLayout& layout);

struct MemoryEstimate;
// Sets est.limit from the setup and, under placement=auto, moves the states beyond
// limit - non_model from the device to the host (optimizer states first: farthest next use
// evicts them first in forward and backward).
void fit_device_limit(const TrainSetup& setup, MemoryEstimate& est);

}  // namespace tide
