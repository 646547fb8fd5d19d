#include "tide/parallel/tensor_grad_sums.h"

#include <algorithm>

#include "tide/core/error.h"
#include "tide/optim/grad_norm.h"

namespace tide {

void tensor_grad_sums(const ChunkLayout& layout, int chunk, const float* g, int64_t begin,
                      int64_t n, std::span<double> out, int threads) {
  TIDE_ASSERT(static_cast<int64_t>(out.size()) == layout.num_tensors());
  for (int id : layout.tensors_in_chunk(chunk)) {
    const TensorSlot& slot = layout.slot(id);
    const int64_t b = std::max(slot.offset, begin);
    const int64_t e = std::min(slot.offset + slot.numel, begin + n);
    out[id] = b < e ? grad_norm_squared(g + (b - begin), DType::F32, e - b, threads) : 0.0;
  }
}

}  // namespace tide
