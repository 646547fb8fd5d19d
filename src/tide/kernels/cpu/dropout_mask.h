#pragma once
// The inverted-dropout mask, shared by dropout_forward/backward and attention so that every
// site uses the same rule: element i of a site is kept when
// PhiloxStream{seed, stream}.uniform(i) >= p, and kept elements are scaled by 1/(1-p).
// The mask is a pure function of (seed, stream, i), so a backward pass or a recomputation
// regenerates it instead of storing it.

#include <cstdint>

#include "tide/core/rng.h"
#include "tide/kernels/ops.h"

namespace tide::cpu {

// Scale of a kept element. Computed once in f32 so every site multiplies by the same number.
inline float dropout_keep_scale(float p) {
  return 1.0f / (1.0f - p);
}

// mult[j] = mask multiplier (1/(1-p) or 0) of stream element first + j, j in [0, n).
// Philox produces four numbers per call; this uses all four instead of calling
// uniform(i) (which computes a block per element), with identical results.
inline void dropout_multipliers(const DropoutSpec& d, uint64_t first, int64_t n, float* mult) {
  const PhiloxStream rng{d.seed, d.stream};
  const float scale = dropout_keep_scale(d.p);
  int64_t j = 0;
  while (j < n) {
    const uint64_t i = first + static_cast<uint64_t>(j);
    const PhiloxCounter r = rng.block(i / 4);
    for (uint64_t k = i % 4; k < 4 && j < n; ++k, ++j) {
      mult[j] = uint_to_unit_float(r[k]) >= d.p ? scale : 0.0f;
    }
  }
}

}  // namespace tide::cpu
