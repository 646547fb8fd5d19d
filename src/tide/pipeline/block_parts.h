#pragma once
// The order in which one stage runs its model blocks' parts (F, B, W per block) inside one
// schedule action. One source of truth for the engine, which runs it, for ZeRO-3's prefetch
// list, and for the estimator's replay of ZeRO's communication buffers.
//
//   F action            F(0), F(1), ..., F(n-1)
//   B action, split     B(n-1), ..., B(0)             (W comes with the schedule's W action)
//   B action, fused     B(n-1) W(n-1), B(n-2) W(n-2), ..., B(0) W(0)
//   W action, split     W(n-1), ..., W(0)
//
// (Deferring the head's W to just before the embedding's, so that the tied embedding's
// gradient chunk is not held through backward, was measured with the estimator's replay: it
// saved no ZeRO-3 buffer and cost one at 1T, where the final layernorm shares a chunk with the
// last layer, whose gradient buffer it then kept through backward.)

#include <vector>

#include "tide/pipeline/schedule.h"

namespace tide::pipeline {

struct BlockPart {
  Op op = Op::F;  // F, B or W
  int block = 0;

  bool operator==(const BlockPart&) const = default;
};

// The block parts of one compute action (F, B or W) of a stage with `blocks` blocks. With
// `split_backward` false a B action also runs every W and a W action runs nothing.
std::vector<BlockPart> block_parts(Op action, int blocks, bool split_backward);

}  // namespace tide::pipeline
