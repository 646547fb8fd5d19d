#pragma once
// The zero_optimization.* settings (DeepSpeed's keys and meaning; docs/config.md), apart from
// the policy (zero.h) so that the config can hold them without the runtime's headers.

#include <cstdint>

namespace tide {

// Sizes are in elements, as in DeepSpeed.
struct ZeroSettings {
  int stage = 0;
  int64_t reduce_bucket_size = 500'000'000;       // gradient elements being reduced at once
  int64_t allgather_bucket_size = 500'000'000;    // parameter elements being gathered at once
  bool overlap_comm = true;                       // reduce-scatter during backward, not blocking it
  int64_t prefetch_bucket_size = 50'000'000;      // stage 3: elements gathered ahead of use
  int64_t max_live_parameters = 1'000'000'000;    // stage 3: gathered elements at most
  int64_t param_persistence_threshold = 100'000;  // stage 3: smaller chunks stay gathered

  bool operator==(const ZeroSettings&) const = default;
};

}  // namespace tide
