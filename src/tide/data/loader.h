#pragma once
// DataLoader: batches of token sequences from one or more token shards.
//
// Every shard is cut into sequences of T+1 consecutive tokens; sequence k of a shard starts at
// token k*T (so consecutive sequences overlap by one token: the last target of one is the first
// input of the next). Sequences never cross shard boundaries. Numbering the sequences of all
// shards one after the other gives the "sequence list" of N sequences.
//
// A global batch is world_size*B sequences taken in order from the sequence list (or from a
// seeded permutation of it when shuffling); data-parallel rank r takes sequences r*B .. r*B+B-1
// of each global batch. So world_size ranks with micro-batch B see exactly the sequences that one
// rank with micro-batch world_size*B sees — the property the equivalence tests rely on.
//
// An epoch is floor(N / (world_size*B)) global batches (the incomplete tail is skipped so every
// rank takes the same number of steps). After the last batch of an epoch the next epoch starts;
// with shuffle the sequence order of epoch e is a permutation drawn from (seed, e), so any
// (seed, epoch, batch) is reproducible and a run can be resumed with seek().
//
// For validation, use shuffle = false and call reset() before every evaluation: the same fixed
// batches come out each time.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tide/data/shard.h"

namespace tide {

// Expands each entry (a file path, or a glob like "data/train_*.bin") into sorted file paths.
// A glob that matches nothing is an error naming the pattern.
std::vector<std::string> expand_shard_paths(const std::vector<std::string>& patterns);

class DataLoader {
 public:
  DataLoader(const std::vector<std::string>& paths, int B, int T, int rank = 0, int world_size = 1,
             uint64_t seed = 0, bool shuffle = false);

  // Loads the next batch into inputs()/targets(), moving to the next epoch when this one is done.
  void next_batch();
  // inputs()[b*T + t] is token t of sequence b; targets()[b*T + t] is the token after it, or -1
  // where a shard's loss mask leaves that token out of the loss (a fine-tuning prompt).
  std::span<const int32_t> inputs() const { return inputs_; }    // (B,T)
  std::span<const int32_t> targets() const { return targets_; }  // (B,T)

  // Back to the first batch of epoch 0.
  void reset() { seek(0, 0); }
  // The next next_batch() returns batch `batch` of epoch `epoch` (for resuming a run).
  void seek(uint64_t epoch, uint64_t batch);

  uint64_t epoch() const { return epoch_; }
  uint64_t next_batch_index() const { return batch_; }  // within the epoch
  uint64_t batches_per_epoch() const { return batches_per_epoch_; }
  uint64_t num_sequences() const { return num_sequences_; }
  uint64_t num_tokens() const;
  int B() const { return B_; }
  int T() const { return T_; }
  const std::vector<std::string>& files() const { return files_; }

  // Largest token id over all shards, and the check that all ids are < vocab_size.
  int max_token() const;
  void check_vocab(int vocab_size) const;

 private:
  // Start of sequence `index` of the sequence list, as (shard, token offset).
  std::pair<size_t, uint64_t> locate(uint64_t index) const;
  void build_order();  // the sequence order of epoch_ (identity unless shuffling)

  int B_, T_, rank_, world_size_;
  uint64_t seed_;
  bool shuffle_;
  std::vector<std::string> files_;
  std::vector<TokenShard> shards_;
  std::vector<uint64_t> first_sequence_;  // first_sequence_[s] = index of shard s's first sequence
  uint64_t num_sequences_ = 0;
  uint64_t batches_per_epoch_ = 0;
  uint64_t epoch_ = 0, batch_ = 0;
  uint64_t order_epoch_ = UINT64_MAX;  // the epoch order_ was built for
  std::vector<uint64_t> order_;        // sequence order of the current epoch (shuffle only)
  std::vector<int32_t> inputs_, targets_;
  std::vector<int32_t> seq_;  // one sequence's T+1 tokens, read from its shard
};

}  // namespace tide
