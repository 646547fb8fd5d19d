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
// updates (3 f32 copies), held for the engine's lifetime, and one memcpy of them per step
// (save); a restore, the same again, happens only on a clipped or skipped step.

#include <span>
#include <vector>

#include "tide/memory/chunk_store.h"

namespace tide {

class OptimizerSnapshot {
 public:
  // Copies the overwritten kinds of every store (allocating on first use).
  void save(std::span<ChunkStore* const> stores);
  // Writes the saved bytes back into the same stores (as save() last saw them).
  void restore(std::span<ChunkStore* const> stores) const;
  // Bytes held by the copy.
  size_t bytes() const;

 private:
  std::vector<std::vector<std::byte>> saved_;  // per (store, kind, chunk), in save() order
};

}  // namespace tide
