#include "tide/model/group_access.h"

#include "tide/core/error.h"

namespace tide {

GroupAccess::GroupAccess(ChunkStore& store, const BlockGroups& block, Use use, int mark_micro_batch)
    : store_(store), block_(block), use_(use), mark_mb_(mark_micro_batch) {
  TIDE_ASSERT(mark_micro_batch < 0 || use == Use::WEIGHT);
}

void GroupAccess::use(int g) {
  TIDE_ASSERT(g >= 0 && g < static_cast<int>(block_.groups.size()));
  if (g == held_) return;
  release_held();
  store_.acquire(block_.groups[g], use_);
  held_ = g;
}

GroupAccess::~GroupAccess() {
  if (held_ >= 0) store_.abandon(block_.groups[held_]);
}

void GroupAccess::finish() {
  release_held();
}

void GroupAccess::release_held() {
  if (held_ < 0) return;
  store_.release(block_.groups[held_], use_);
  if (mark_mb_ >= 0)
    for (int id : block_.grads_done[held_]) store_.mark_grad_ready(id, mark_mb_);
  held_ = -1;
}

}  // namespace tide
