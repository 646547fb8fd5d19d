#include "tide/pipeline/stage_peaks.h"

#include <algorithm>

#include "tide/pipeline/block_parts.h"

namespace tide::pipeline {

std::vector<ActionSpan> action_spans(const std::vector<Action>& actions, int microbatches,
                                     int chunks) {
  std::vector<ActionSpan> s(static_cast<size_t>(microbatches) * chunks);
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const Action& a = actions[i];
    if (a.op == Op::OptimizerStep) continue;
    ActionSpan& sp = s[a.mb * chunks + a.chunk];
    if (sp.first < 0) sp.first = i;
    sp.last = i;
  }
  return s;
}

StagePeaks stage_peaks(const Schedule& s, int stage, const std::vector<int>& blocks) {
  const std::vector<Action>& actions = s.actions[stage];
  const std::vector<ActionSpan> sp = action_spans(actions, s.microbatches, s.chunks);
  std::vector<int> slots(s.chunks, 0);
  StagePeaks peak{std::vector<int>(s.chunks, 1), 1};
  int stashes = 0;
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const Action& a = actions[i];
    if (a.op == Op::OptimizerStep) continue;
    const ActionSpan& span = sp[a.mb * s.chunks + a.chunk];
    if (span.first == i) peak.slots[a.chunk] = std::max(peak.slots[a.chunk], ++slots[a.chunk]);
    if (span.last == i) --slots[a.chunk];
    if (!is_compute(a.op)) continue;
    for (const BlockPart& p : block_parts(a.op, blocks[a.chunk], s.split_backward)) {
      if (p.op == Op::B) peak.stashes = std::max(peak.stashes, ++stashes);
      if (p.op == Op::W) --stashes;
    }
  }
  return peak;
}

}  // namespace tide::pipeline
