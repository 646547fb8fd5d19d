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

// (B,T) tokens and targets of a noisy chain over a vocabulary of V: each token is
// (mul * previous + add) mod V, or with probability 1/4 a random one, drawn from `rng`; the
// targets are the tokens shifted by one. A small model learns it in a few steps, so a test's
// losses visibly fall. Shared by the multi-rank pipeline tests.
inline void fill_noisy_chain(const PhiloxStream& rng, int B, int T, uint32_t V, uint32_t mul,
                             uint32_t add, int32_t* inputs, int32_t* targets) {
  uint32_t prev = rng.uint(0) % V;
  for (int i = 0; i < B * (T + 1); ++i) {
    const uint32_t next =
        rng.uint(2 * i + 1) % 4 == 0 ? rng.uint(2 * i + 2) % V : (mul * prev + add) % V;
    const int b = i / (T + 1), t = i % (T + 1);
    if (t < T) inputs[b * T + t] = static_cast<int32_t>(next);
    if (t > 0) targets[b * T + t - 1] = static_cast<int32_t>(next);
    prev = next;
  }
}

}  // namespace tide::test
