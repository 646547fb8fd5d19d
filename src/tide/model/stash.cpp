#include "tide/model/stash.h"

#include "tide/core/error.h"

namespace tide {

StashPool::StashPool(size_t slot_bytes, int slots, Allocator* allocator) : slot_bytes_(slot_bytes) {
  TIDE_CHECK(slots >= 1, "a stash pool needs at least one slot (got {})", slots);
  for (int i = 0; i < slots; ++i)
    slots_.emplace_back(fmt::format("W stash {}", i), slot_bytes, allocator);
  for (int i = slots - 1; i >= 0; --i) free_.push_back(i);
}

int StashPool::take() {
  TIDE_CHECK(!free_.empty(),
             "all {} W stash slots are in use: more (micro-batch, block) backward_input results "
             "wait for their backward_weight than the pool was sized for; size the pool from the "
             "schedule (Engine does)",
             slots_.size());
  const int i = free_.back();
  free_.pop_back();
  ++in_use_;
  return i;
}

void StashPool::give_back(int i) {
  TIDE_ASSERT(i >= 0 && i < slots());
  slots_[i].reset();
  free_.push_back(i);
  --in_use_;
}

}  // namespace tide
