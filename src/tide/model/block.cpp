#include "tide/model/block.h"

namespace tide {

// Keyed by global coordinates (see DropoutSpec): the stream names the site and the step, the
// counter the element's global sequence, position and unsharded feature. A DP rank, an
// accumulation micro-batch, a TP or SP shard therefore draws exactly the mask the single-rank
// run draws for the same element, and a recomputation redraws it.
DropoutSpec BlockEnv::dropout(const MicroBatch& mb, int layer, int site, int64_t width,
                              int64_t col0) const {
  DropoutSpec d;
  if (!mb.training || config->dropout <= 0.0f) return d;
  d.p = config->dropout;
  d.seed = mb.seed;
  d.stream = rng_stream_id(mb.step, static_cast<uint64_t>(layer), static_cast<uint64_t>(site));
  d.seq0 = mb.seq0;
  d.pos0 = 0;
  d.seq_stride = mb.T;
  d.width_full = width;
  d.col0 = col0;
  return d;
}

}  // namespace tide
