#include "tide/model/block.h"

namespace tide {

DropoutSpec BlockEnv::dropout(const MicroBatch& mb, int layer, int site) const {
  DropoutSpec d;
  if (!mb.training || config->dropout <= 0.0f) return d;
  d.p = config->dropout;
  d.seed = mb.seed;
  d.stream = rng_stream_id(mb.step, static_cast<uint64_t>(mb.index), static_cast<uint64_t>(layer),
                           static_cast<uint64_t>(site));
  return d;
}

}  // namespace tide
