#pragma once
// A training micro-batch filled for model tests: tokens and targets below 41 from a Philox
// stream keyed by the micro-batch index m, dropout keys (seed 5, step 3, sequences m*B..), and
// the weight 0.5 of two accumulated micro-batches. Shared by the deferred-W and pipeline-stage
// tests, which compare orders of the same work and so must feed the same batches.

#include "tide/core/rng.h"
#include "tide/model/block.h"

namespace tide::test {

inline void fill_test_batch(MicroBatch& mb, int m) {
  const PhiloxStream rng{99, static_cast<uint64_t>(m)};
  for (int64_t i = 0; i < mb.tokens.numel(); ++i) {
    mb.tokens.i32()[i] = static_cast<int32_t>(rng.uint(2 * i) % 41);
    mb.targets.i32()[i] = static_cast<int32_t>(rng.uint(2 * i + 1) % 41);
  }
  mb.training = true;
  mb.seed = 5;
  mb.step = 3;
  mb.index = m;
  mb.seq0 = static_cast<uint64_t>(m) * mb.B;
  mb.dloss = 0.5f;
}

}  // namespace tide::test
