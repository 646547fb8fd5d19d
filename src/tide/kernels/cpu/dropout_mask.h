#pragma once
// The inverted-dropout mask, shared by dropout_forward/backward and attention so that every
// site uses the same rule: the element at counter k is kept when
// PhiloxStream{seed, stream}.uniform(k) >= p, and kept elements are scaled by 1/(1-p).
// Counters come from the element's GLOBAL coordinates (ops.h, DropoutSpec), so the mask is a
// pure function of (seed, stream, global position): a backward pass or a recomputation
// regenerates it instead of storing it, and a shard of the activation (another rank, another
// micro-batch split) draws exactly the slice of the single-rank mask it holds.
//
// Within one row the counters are contiguous (j, or the key position u), so a kernel draws a
// row at a time with dropout_multipliers; rows are independent, which keeps results
// independent of how rows are spread over threads.

#include <cstdint>

#include "tide/core/rng.h"
#include "tide/kernels/ops.h"

namespace tide::cpu {

// Scale of a kept element. Computed once in f32 so every site multiplies by the same number.
inline float dropout_keep_scale(float p) {
  return 1.0f / (1.0f - p);
}

// First counter of row (b,t) of an activation (B,T,W) (the spec's defaults resolved: a zero
// seq_stride is T, a zero width_full is W): ((seq0 + b) * seq_stride + pos0 + t) * width_full
// + col0. Element (b,t,j) is this + j.
inline uint64_t dropout_row_counter(const DropoutSpec& d, int64_t T, int64_t W, int64_t b,
                                    int64_t t) {
  const uint64_t S = static_cast<uint64_t>(d.seq_stride > 0 ? d.seq_stride : T);
  const uint64_t Wf = static_cast<uint64_t>(d.width_full > 0 ? d.width_full : W);
  return ((d.seq0 + static_cast<uint64_t>(b)) * S + static_cast<uint64_t>(d.pos0 + t)) * Wf +
         static_cast<uint64_t>(d.col0);
}

// First counter of row (b,h,t) of attention probabilities (B,NH,T,T) (a zero width_full is
// NH): (((seq0 + b) * width_full + col0 + h) * seq_stride + pos0 + t) * seq_stride. Key u of
// the row is this + u.
inline uint64_t attention_dropout_row_counter(const DropoutSpec& d, int64_t T, int64_t NH,
                                              int64_t b, int64_t h, int64_t t) {
  const uint64_t S = static_cast<uint64_t>(d.seq_stride > 0 ? d.seq_stride : T);
  const uint64_t Wf = static_cast<uint64_t>(d.width_full > 0 ? d.width_full : NH);
  return (((d.seq0 + static_cast<uint64_t>(b)) * Wf + static_cast<uint64_t>(d.col0 + h)) * S +
          static_cast<uint64_t>(d.pos0 + t)) *
         S;
}

// mult[j] = mask multiplier (1/(1-p) or 0) of counter first + j, j in [0, n).
// Philox produces four numbers per call; this uses all four instead of calling
// uniform(k) (which computes a block per element), with identical results.
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
