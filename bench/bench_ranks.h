#pragma once
// Helpers of the multi-rank training benchmarks (dp, offload): a random token shard per rank and
// the maximum of a per-rank figure over the world.

#include <unistd.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tide/comm/process_group.h"
#include "tide/core/rng.h"
#include "tide/data/shard.h"

namespace tide::bench {

// Random tokens: enough sequences for a few global batches of `world` ranks (the loader wraps
// around epochs). Each rank writes its own copy under /tmp (named after `bench`, the process
// and the rank), so no shared file system or barrier is needed.
inline std::string write_random_shard(const char* bench, int world, int rank, int micro_batch,
                                      int seq_len, int vocab) {
  const std::string path = fmt::format("/tmp/tide_bench_{}_{}_{}.bin", bench, ::getpid(), rank);
  const int64_t sequences = int64_t{4} * world * micro_batch;
  std::vector<uint16_t> tokens(static_cast<size_t>(sequences * seq_len + 1));
  const PhiloxStream rng{11, 0};
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint16_t>(rng.uint(i) % static_cast<uint32_t>(vocab));
  write_token_shard(path, std::span<const uint16_t>(tokens));
  return path;
}

// Maximum of a per-rank value over the world (all-gather, then max: no max reduction needed).
inline double max_over_ranks(ProcessGroup& world, double v) {
  std::vector<float> all(static_cast<size_t>(world.size()));
  float f = static_cast<float>(v);
  world.all_gather(Tensor(&f, {1}), Tensor(all.data(), {world.size()}));
  return *std::max_element(all.begin(), all.end());
}

}  // namespace tide::bench
