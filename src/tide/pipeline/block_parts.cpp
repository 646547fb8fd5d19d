#include "tide/pipeline/block_parts.h"

#include "tide/core/error.h"

namespace tide::pipeline {

std::vector<BlockPart> block_parts(Op action, int blocks, bool split_backward) {
  TIDE_ASSERT(is_compute(action));
  std::vector<BlockPart> parts;
  if (action == Op::F) {
    for (int i = 0; i < blocks; ++i) parts.push_back({Op::F, i});
  } else if (action == Op::B) {
    for (int i = blocks - 1; i >= 0; --i) {
      parts.push_back({Op::B, i});
      if (!split_backward) parts.push_back({Op::W, i});
    }
  } else if (split_backward) {
    for (int i = blocks - 1; i >= 0; --i) parts.push_back({Op::W, i});
  }
  return parts;
}

}  // namespace tide::pipeline
