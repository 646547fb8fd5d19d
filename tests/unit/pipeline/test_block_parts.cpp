// block_parts: the block order the engine runs, ZeRO-3 prefetches by and the estimator replays.
#include <gtest/gtest.h>

#include "tide/pipeline/block_parts.h"

using namespace tide::pipeline;

TEST(BlockParts, FusedBackwardRunsEachBlocksWRightAfterItsB) {
  EXPECT_EQ(block_parts(Op::F, 3, false),
            (std::vector<BlockPart>{{Op::F, 0}, {Op::F, 1}, {Op::F, 2}}));
  EXPECT_EQ(block_parts(Op::B, 3, false),
            (std::vector<BlockPart>{
                {Op::B, 2}, {Op::W, 2}, {Op::B, 1}, {Op::W, 1}, {Op::B, 0}, {Op::W, 0}}));
  EXPECT_TRUE(block_parts(Op::W, 3, false).empty());
}

TEST(BlockParts, SplitBackwardLeavesEveryWToTheWAction) {
  EXPECT_EQ(block_parts(Op::B, 3, true),
            (std::vector<BlockPart>{{Op::B, 2}, {Op::B, 1}, {Op::B, 0}}));
  EXPECT_EQ(block_parts(Op::W, 3, true),
            (std::vector<BlockPart>{{Op::W, 2}, {Op::W, 1}, {Op::W, 0}}));
}
