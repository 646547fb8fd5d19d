#pragma once
// OptimizerSnapshot: a copy of what an AdamW step overwrites (MASTER, which is PARAM in f32
// training, ADAM_M and ADAM_V; the owned slice of a sliced kind), so that an optimistic step
// can be undone bitwise. Optimizer post-validation (PipelineEngine) saves one before the step it
// runs without waiting for the global gradient norm, and restores it when the norm says the
// step had to be clipped or skipped.
//
// Why a copy, not an inverse update: undoing AdamW arithmetically (p + lr*m/(sqrt(v)+eps), then
// the moments backwards) does not give back the same float bits, and the post-validated run
// must equal the synchronous one bit for bit. The cost: 12 bytes per parameter this rank
// updates (3 f32 copies), held for the engine's lifetime, and one copy of them per step; a
// restore, the same again, happens only on a clipped or skipped step.
//
// The copy can be taken piece by piece (begin, save_some, ..., save_rest) at any time between
// the previous update and this one, since nothing else writes these kinds: PipelineEngine
// copies pieces while its stage waits for a message (a pipeline bubble) and the rest before
// the optimistic update.
//
// On a device the pieces are copies on the model's stream (the mover): AdamW, queued after
// them, overwrites nothing before it is saved, and a restore is queued before the redo. The
// copy is kept in host memory (12 bytes per parameter would double a GPU's optimizer state),
// page-locked there (make_host_allocator), so that the copies do not block the host.

#include <memory>
#include <span>
#include <vector>

#include "tide/core/arena.h"
#include "tide/memory/chunk_store.h"

namespace tide {

class OptimizerSnapshot {
 public:
  // Starts a new copy of `stores` (allocating on first use); nothing is copied yet. `op`: the
  // context whose stream writes the stores (the models'; the CPU's: copies happen at once).
  void begin(std::span<ChunkStore* const> stores, const OpContext& op = {});
  // Copies up to about `max_bytes` more (whole pieces of at most that size); false when
  // nothing was left to copy.
  bool save_some(size_t max_bytes);
  // Copies what is left; afterwards the copy is complete.
  void save_rest();
  size_t pending_bytes() const;
  // begin + save_rest.
  void save(std::span<ChunkStore* const> stores, const OpContext& op = {});
  // Writes the copy back into the stores begin() saw. The copy must be complete.
  void restore() const;
  // Bytes held by the copy.
  size_t bytes() const;

 private:
  struct Range {
    Tensor live;   // in the store (flat)
    Tensor saved;  // its copy, in copies_
  };
  OpContext op_;
  std::unique_ptr<Allocator> host_;  // page-locked host memory on a device
  Arena copies_;                     // from host_
  std::vector<Range> ranges_;        // per (store, kind, chunk)
  size_t next_ = 0;                  // ranges_[next_] is being copied from offset done_
  size_t done_ = 0;
};

}  // namespace tide
