#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "test_util.h"
#include "tide/data/loader.h"

namespace tide {
namespace {

using test::expected_error;
using test::TempDir;

// A shard whose token at position i is (base + i) % 65536: every token says where it came from.
void write_counting_shard(const std::string& path, int n, int base = 0) {
  std::vector<uint16_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>((base + i) % 65536);
  write_token_shard(path, std::span<const uint16_t>(tokens));
}

std::vector<int32_t> as_vector(std::span<const int32_t> s) {
  return {s.begin(), s.end()};
}

TEST(DataLoader, SequentialBatchesAreConsecutiveWindows) {
  TempDir dir;
  write_counting_shard(dir / "a.bin", 101);  // (101-1)/4 = 25 sequences of T+1 = 5 tokens
  DataLoader loader({dir / "a.bin"}, /*B=*/2, /*T=*/4);
  EXPECT_EQ(loader.num_sequences(), 25u);
  EXPECT_EQ(loader.batches_per_epoch(), 12u);
  loader.next_batch();
  EXPECT_EQ(as_vector(loader.inputs()), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(as_vector(loader.targets()), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  loader.next_batch();
  EXPECT_EQ(as_vector(loader.inputs()), (std::vector<int32_t>{8, 9, 10, 11, 12, 13, 14, 15}));
}

// A shard's loss mask turns the targets it leaves out into -1 (the loss ignores them); inputs
// stay the tokens.
TEST(DataLoader, LossMaskedTargetsAreMinusOne) {
  TempDir dir;
  std::vector<int32_t> tokens(9);
  std::vector<uint8_t> mask(9, 1);
  for (int i = 0; i < 9; ++i) tokens[i] = 10 + i;
  mask[0] = mask[1] = mask[2] = mask[6] = 0;  // tokens 10, 11, 12 and 16 are not targets
  write_token_shard(dir / "m.bin", std::span<const int32_t>(tokens), mask);
  DataLoader loader({dir / "m.bin"}, /*B=*/1, /*T=*/4);
  loader.next_batch();
  EXPECT_EQ(as_vector(loader.inputs()), (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(as_vector(loader.targets()), (std::vector<int32_t>{-1, -1, 13, 14}));
  loader.next_batch();
  EXPECT_EQ(as_vector(loader.inputs()), (std::vector<int32_t>{14, 15, 16, 17}));
  EXPECT_EQ(as_vector(loader.targets()), (std::vector<int32_t>{15, -1, 17, 18}));
}

TEST(DataLoader, WrapsToTheNextEpochAndResets) {
  TempDir dir;
  write_counting_shard(dir / "a.bin", 41);  // 10 sequences of T=4: 2 batches of B=4 (2 dropped)
  DataLoader loader({dir / "a.bin"}, 4, 4);
  ASSERT_EQ(loader.batches_per_epoch(), 2u);
  loader.next_batch();
  const auto first = as_vector(loader.inputs());
  loader.next_batch();
  EXPECT_EQ(loader.epoch(), 1u);
  loader.next_batch();
  EXPECT_EQ(as_vector(loader.inputs()), first);  // epoch 1 starts over (no shuffle)
  loader.next_batch();
  loader.reset();
  EXPECT_EQ(loader.epoch(), 0u);
  loader.next_batch();
  EXPECT_EQ(as_vector(loader.inputs()), first);
}

TEST(DataLoader, SequencesNeverCrossShardsAndGlobsAreSorted) {
  TempDir dir;
  write_counting_shard(dir / "train_001.bin", 13, 1000);  // 3 sequences of T=4
  write_counting_shard(dir / "train_000.bin", 9, 0);      // 2 sequences
  DataLoader loader({dir / "train_*.bin"}, 1, 4);
  ASSERT_EQ(loader.files().size(), 2u);
  EXPECT_EQ(loader.files()[0], dir / "train_000.bin");
  EXPECT_EQ(loader.num_sequences(), 5u);
  EXPECT_EQ(loader.num_tokens(), 22u);
  const std::vector<int32_t> starts = {0, 4, 1000, 1004, 1008};
  for (int32_t start : starts) {
    loader.next_batch();
    EXPECT_EQ(loader.inputs()[0], start);
    EXPECT_EQ(loader.targets()[3], start + 4);  // the T+1'th token comes from the same shard
  }
}

// The property data parallelism relies on: world_size ranks with micro-batch B together read
// exactly the global batch that one rank with micro-batch world_size*B reads.
void expect_ranks_partition_the_global_batch(bool shuffle) {
  TempDir dir;
  write_counting_shard(dir / "a.bin", 3000);
  write_counting_shard(dir / "b.bin", 2001, 30000);
  const std::vector<std::string> paths = {dir / "*.bin"};
  const int B = 3, T = 8, world = 4;
  DataLoader single(paths, world * B, T, 0, 1, /*seed=*/7, shuffle);
  std::vector<DataLoader> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(paths, B, T, r, world, 7, shuffle);
  ASSERT_EQ(single.batches_per_epoch(), ranks[0].batches_per_epoch());
  const uint64_t steps = single.batches_per_epoch() * 2 + 3;  // crosses two epoch boundaries
  for (uint64_t step = 0; step < steps; ++step) {
    single.next_batch();
    std::vector<int32_t> inputs, targets;
    for (DataLoader& rank : ranks) {
      rank.next_batch();
      inputs.insert(inputs.end(), rank.inputs().begin(), rank.inputs().end());
      targets.insert(targets.end(), rank.targets().begin(), rank.targets().end());
    }
    ASSERT_EQ(inputs, as_vector(single.inputs())) << "step " << step;
    ASSERT_EQ(targets, as_vector(single.targets())) << "step " << step;
  }
}

TEST(DataLoader, RanksPartitionTheGlobalBatchSequential) {
  expect_ranks_partition_the_global_batch(false);
}
TEST(DataLoader, RanksPartitionTheGlobalBatchShuffled) {
  expect_ranks_partition_the_global_batch(true);
}

// Collects the start token of every sequence in one epoch.
std::vector<int32_t> epoch_starts(DataLoader& loader) {
  std::vector<int32_t> starts;
  for (uint64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    loader.next_batch();
    for (int i = 0; i < loader.B(); ++i) starts.push_back(loader.inputs()[i * loader.T()]);
  }
  return starts;
}

TEST(DataLoader, ShuffleIsASeededPermutationPerEpoch) {
  TempDir dir;
  write_counting_shard(dir / "a.bin", 4 * 64 + 1);  // 64 sequences, 16 batches of 4
  DataLoader a({dir / "a.bin"}, 4, 4, 0, 1, /*seed=*/1, /*shuffle=*/true);
  DataLoader b({dir / "a.bin"}, 4, 4, 0, 1, /*seed=*/1, /*shuffle=*/true);
  DataLoader c({dir / "a.bin"}, 4, 4, 0, 1, /*seed=*/2, /*shuffle=*/true);
  const auto a0 = epoch_starts(a), a1 = epoch_starts(a);
  EXPECT_EQ(a0, epoch_starts(b));  // same seed, same order
  EXPECT_NE(a0, epoch_starts(c));  // another seed, another order
  EXPECT_NE(a0, a1);               // another epoch, another order
  std::vector<int32_t> sorted = a0;
  std::sort(sorted.begin(), sorted.end());
  for (int k = 0; k < 64; ++k) EXPECT_EQ(sorted[k], 4 * k);  // each sequence exactly once
  std::vector<int32_t> sequential(64);
  for (int k = 0; k < 64; ++k) sequential[k] = 4 * k;
  EXPECT_NE(a0, sequential);
}

TEST(DataLoader, SeekReproducesAnyBatch) {
  TempDir dir;
  write_counting_shard(dir / "a.bin", 4 * 40 + 1);
  DataLoader a({dir / "a.bin"}, 2, 4, 0, 1, 3, true);
  for (int i = 0; i < 25; ++i) a.next_batch();  // epoch 1, batch 5 comes next
  ASSERT_EQ(a.epoch(), 1u);
  ASSERT_EQ(a.next_batch_index(), 5u);
  DataLoader b({dir / "a.bin"}, 2, 4, 0, 1, 3, true);
  b.seek(1, 5);
  a.next_batch();
  b.next_batch();
  EXPECT_EQ(as_vector(a.inputs()), as_vector(b.inputs()));
  EXPECT_NE(expected_error([&] { b.seek(0, 20); }).find("past the end of an epoch of 20 batches"),
            std::string::npos);
}

TEST(DataLoader, ValidationBatchesAreFixedAfterReset) {
  TempDir dir;
  write_counting_shard(dir / "val.bin", 4 * 20 + 1);
  DataLoader val({dir / "val.bin"}, 2, 4);
  std::vector<int32_t> first, second;
  for (int i = 0; i < 3; ++i) {
    val.next_batch();
    first.insert(first.end(), val.inputs().begin(), val.inputs().end());
  }
  val.reset();
  for (int i = 0; i < 3; ++i) {
    val.next_batch();
    second.insert(second.end(), val.inputs().begin(), val.inputs().end());
  }
  EXPECT_EQ(first, second);
}

TEST(DataLoader, ShardTooShortForOneSequence) {
  TempDir dir;
  write_counting_shard(dir / "tiny.bin", 8);
  const std::string msg = expected_error([&] { DataLoader l({dir / "tiny.bin"}, 1, 8); });
  EXPECT_NE(msg.find(dir / "tiny.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("has 8 tokens, too few for one sequence of T+1 = 9 tokens"), std::string::npos)
      << msg;
}

TEST(DataLoader, TooFewSequencesForOneGlobalBatch) {
  TempDir dir;
  write_counting_shard(dir / "a.bin", 4 * 5 + 1);  // 5 sequences
  const std::string msg = expected_error([&] { DataLoader l({dir / "a.bin"}, 3, 4, 0, 2); });
  EXPECT_NE(msg.find("5 sequences"), std::string::npos) << msg;
  EXPECT_NE(msg.find("world_size*B = 2*3 = 6"), std::string::npos) << msg;
}

TEST(DataLoader, GlobMatchingNothing) {
  TempDir dir;
  const std::string msg = expected_error([&] { DataLoader l({dir / "train_*.bin"}, 1, 4); });
  EXPECT_NE(msg.find("no token shards match " + (dir / "train_*.bin")), std::string::npos) << msg;
}

TEST(DataLoader, MissingFileAndBadRank) {
  TempDir dir;
  EXPECT_NE(
      expected_error([&] { DataLoader l({dir / "x.bin"}, 1, 4); }).find("no such token shard"),
      std::string::npos);
  write_counting_shard(dir / "a.bin", 100);
  EXPECT_NE(expected_error([&] {
              DataLoader l({dir / "a.bin"}, 1, 4, 2, 2);
            }).find("rank 2 is outside world size 2"),
            std::string::npos);
}

TEST(DataLoader, CheckVocabCoversEveryShard) {
  TempDir dir;
  write_counting_shard(dir / "a.bin", 100);
  write_counting_shard(dir / "b.bin", 100, 5000);
  DataLoader loader({dir / "a.bin", dir / "b.bin"}, 1, 4);
  EXPECT_EQ(loader.max_token(), 5099);
  EXPECT_NO_THROW(loader.check_vocab(5100));
  const std::string msg = expected_error([&] { loader.check_vocab(5050); });
  EXPECT_NE(msg.find("token id 5050 at position 50 of " + (dir / "b.bin")), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace tide
