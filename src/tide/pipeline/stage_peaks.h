#pragma once
// What one stage of a schedule holds at once: the micro-batch slots of each model chunk and the
// W stashes. One source of truth for the engine, which sizes its pools by it, and for the
// estimator, which sizes the same pools.

#include <vector>

#include "tide/pipeline/schedule.h"

namespace tide::pipeline {

// A (micro-batch, chunk)'s first and last action in a stage's action list (its RecvAct or F to
// its W, or the SendGrad after a fused backward); -1 when none names it.
struct ActionSpan {
  int first = -1, last = -1;
};
// Per key mb * chunks + chunk.
std::vector<ActionSpan> action_spans(const std::vector<Action>& actions, int microbatches,
                                     int chunks);

struct StagePeaks {
  std::vector<int> slots;  // per chunk: (micro-batch) slots alive at once, at least 1
  int stashes = 1;         // (micro-batch, block) W stashes between a B part and its W
};
// `blocks[c]`: the blocks of chunk c's model (block_parts.h).
StagePeaks stage_peaks(const Schedule& s, int stage, const std::vector<int>& blocks);

}  // namespace tide::pipeline
