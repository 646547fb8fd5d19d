#include "tide/data/loader.h"

#include <glob.h>

#include <algorithm>
#include <numeric>

#include "tide/core/error.h"
#include "tide/core/rng.h"

namespace tide {

std::vector<std::string> expand_shard_paths(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (const std::string& pattern : patterns) {
    if (pattern.find_first_of("*?[") == std::string::npos) {
      files.push_back(pattern);  // a plain path: TokenShard reports it if it is missing
      continue;
    }
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> matched(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
    globfree(&g);
    TIDE_CHECK(!matched.empty(),
               "no token shards match {}; check the pattern, or create shards with `tide prepare`",
               pattern);
    std::sort(matched.begin(), matched.end());  // glob sorts too, but by locale; we want bytes
    files.insert(files.end(), matched.begin(), matched.end());
  }
  TIDE_CHECK(!files.empty(),
             "no token shard paths given; pass a file like data/train.bin or a glob");
  return files;
}

DataLoader::DataLoader(const std::vector<std::string>& paths, int B, int T, int rank,
                       int world_size, uint64_t seed, bool shuffle)
    : B_(B), T_(T), rank_(rank), world_size_(world_size), seed_(seed), shuffle_(shuffle) {
  TIDE_CHECK(B >= 1 && T >= 1, "batch size B={} and sequence length T={} must both be >= 1", B, T);
  TIDE_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
             "data-parallel rank {} is outside world size {}; ranks run from 0 to world_size-1",
             rank, world_size);
  files_ = expand_shard_paths(paths);
  shards_.reserve(files_.size());
  for (const std::string& file : files_) {
    const TokenShard& shard = shards_.emplace_back(file);
    TIDE_CHECK(shard.size() >= static_cast<size_t>(T) + 1,
               "{}: has {} tokens, too few for one sequence of T+1 = {} tokens; use a shorter "
               "sequence length or a larger shard",
               file, shard.size(), T + 1);
    first_sequence_.push_back(num_sequences_);
    num_sequences_ += (shard.size() - 1) / T;  // starts 0, T, 2T, ... with start+T+1 <= size
  }
  const uint64_t global_batch = static_cast<uint64_t>(world_size) * B;
  batches_per_epoch_ = num_sequences_ / global_batch;
  TIDE_CHECK(
      batches_per_epoch_ >= 1,
      "the shards ({}) hold {} sequences of {} tokens, fewer than one global batch of "
      "world_size*B = {}*{} = {} sequences; lower the batch size or sequence length, or add data",
      files_.front() + (files_.size() > 1 ? ", ..." : ""), num_sequences_, T + 1, world_size, B,
      global_batch);
  inputs_.resize(static_cast<size_t>(B) * T);
  targets_.resize(static_cast<size_t>(B) * T);
  seq_.resize(static_cast<size_t>(T) + 1);
}

uint64_t DataLoader::num_tokens() const {
  uint64_t n = 0;
  for (const TokenShard& shard : shards_) n += shard.size();
  return n;
}

int DataLoader::max_token() const {
  int m = 0;
  for (const TokenShard& shard : shards_) {
    TIDE_CHECK(shard.max_token() <= static_cast<uint32_t>(INT32_MAX),
               "{}: token id {} is beyond any vocabulary (ids are below 2^31); the shard is "
               "corrupt: re-create it with `tide prepare`",
               shard.path(), shard.max_token());
    m = std::max(m, static_cast<int>(shard.max_token()));
  }
  return m;
}

void DataLoader::check_vocab(int vocab_size) const {
  for (const TokenShard& shard : shards_) shard.check_vocab(vocab_size);
}

void DataLoader::seek(uint64_t epoch, uint64_t batch) {
  TIDE_CHECK(batch < batches_per_epoch_,
             "batch {} is past the end of an epoch of {} batches; seek to a batch below {}", batch,
             batches_per_epoch_, batches_per_epoch_);
  epoch_ = epoch;
  batch_ = batch;
}

std::pair<size_t, uint64_t> DataLoader::locate(uint64_t index) const {
  // The last shard whose first sequence is <= index.
  const auto it = std::upper_bound(first_sequence_.begin(), first_sequence_.end(), index);
  const size_t shard = static_cast<size_t>(it - first_sequence_.begin()) - 1;
  return {shard, (index - first_sequence_[shard]) * static_cast<uint64_t>(T_)};
}

void DataLoader::build_order() {
  order_.resize(num_sequences_);
  std::iota(order_.begin(), order_.end(), uint64_t{0});
  // Fisher-Yates with a counter-based stream keyed by (seed, epoch): the permutation of epoch e
  // does not depend on how many batches were drawn before, so seek() can jump anywhere.
  const PhiloxStream rng{seed_, rng_stream_id(0x64617461 /* "data" */, epoch_)};
  for (uint64_t i = num_sequences_ - 1; i > 0; --i) {
    const uint64_t r = (static_cast<uint64_t>(rng.uint(2 * i)) << 32) | rng.uint(2 * i + 1);
    std::swap(order_[i], order_[r % (i + 1)]);  // modulo bias is < 2^-32 for any real N
  }
  order_epoch_ = epoch_;
}

void DataLoader::next_batch() {
  if (shuffle_ && order_epoch_ != epoch_) build_order();
  const uint64_t first = (batch_ * world_size_ + rank_) * static_cast<uint64_t>(B_);
  for (int b = 0; b < B_; ++b) {
    const uint64_t slot = first + b;
    const auto [shard, start] = locate(shuffle_ ? order_[slot] : slot);
    std::vector<int32_t>& seq = seq_;  // (T+1) tokens, whatever the shard's token width
    shards_[shard].copy_tokens(start, static_cast<size_t>(T_) + 1, seq.data());
    int32_t* in = inputs_.data() + static_cast<size_t>(b) * T_;
    int32_t* tg = targets_.data() + static_cast<size_t>(b) * T_;
    for (int t = 0; t < T_; ++t) {
      in[t] = seq[t];
      tg[t] = seq[t + 1];
    }
    if (shards_[shard].has_loss_mask()) {  // a masked target is -1: the loss ignores it
      const std::span<const uint8_t> mask = shards_[shard].loss_mask().subspan(start, T_ + 1);
      for (int t = 0; t < T_; ++t) {
        if (mask[t + 1] == 0) tg[t] = -1;
      }
    }
  }
  if (++batch_ == batches_per_epoch_) {
    batch_ = 0;
    ++epoch_;
  }
}

}  // namespace tide
