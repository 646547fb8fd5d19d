#pragma once
// A block part's hold on its parameters, one group at a time (model/param_groups.h): the
// model's ops read only the group acquired, so ZeRO-3 and automatic placement need only that
// group's chunks on the compute tier (plus what they prefetch).

#include "tide/memory/chunk_store.h"
#include "tide/model/param_groups.h"

namespace tide {

class GroupAccess {
 public:
  // For part `use` of `block`. `mark_micro_batch` >= 0 (a W only): each group's finished
  // gradients are reported complete for that micro-batch when the part lets go of the group
  // (ChunkStore::mark_grad_ready: where ZeRO starts their reduction).
  GroupAccess(ChunkStore& store, const BlockGroups& block, Use use, int mark_micro_batch = -1);
  // After an error in the part: abandons the group held (ChunkStore::abandon).
  ~GroupAccess();
  GroupAccess(const GroupAccess&) = delete;
  GroupAccess& operator=(const GroupAccess&) = delete;

  // Acquires group g, releasing the group held before (nothing when g is the one held).
  void use(int g);
  // The part is done: releases the group held.
  void finish();
  Use use_of() const { return use_; }

 private:
  void release_held();
  ChunkStore& store_;
  const BlockGroups& block_;
  const Use use_;
  const int mark_mb_;
  int held_ = -1;
};

}  // namespace tide
