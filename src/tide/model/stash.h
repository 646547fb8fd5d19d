#pragma once
// StashPool: where backward_input (B) leaves what backward_weight (W) needs, one region per
// (micro-batch, block) from B until its W has run. Deferring W (zero-bubble pipelines: all B
// then all W, or W of one micro-batch interleaved with B of the next) then needs only enough
// regions for the stashes in flight at once; the engine counts them from its schedule, so the
// pool is the sum over in-flight stashes, not one workspace reused by every block.
//
// Each region ("slot") is its own arena of the same size (the largest block's stash), so slots
// are taken and given back in any order without fragmentation.

#include <string>
#include <vector>

#include "tide/core/arena.h"

namespace tide {

class StashPool {
 public:
  StashPool() = default;
  // Slots of `slot_bytes` from `allocator` (the model's activation memory; nullptr: the host).
  StashPool(size_t slot_bytes, int slots, Allocator* allocator = nullptr);

  // A free slot's index (its arena empty); throws a tide::Error when every slot is in use.
  int take();
  Arena& slot(int i) { return slots_[i]; }
  void give_back(int i);

  int slots() const { return static_cast<int>(slots_.size()); }
  int in_use() const { return in_use_; }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t bytes() const { return slot_bytes_ * slots_.size(); }

 private:
  size_t slot_bytes_ = 0;
  std::vector<Arena> slots_;
  std::vector<int> free_;
  int in_use_ = 0;
};

}  // namespace tide
