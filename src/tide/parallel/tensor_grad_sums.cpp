#include "tide/parallel/tensor_grad_sums.h"

#include <algorithm>

#include "tide/core/error.h"
#include "tide/optim/grad_norm.h"

namespace tide {

void tensor_grad_sums(const ChunkLayout& layout, int chunk, const Tensor& g, int64_t begin,
                      std::span<double> out, int threads) {
  TIDE_ASSERT(static_cast<int64_t>(out.size()) == layout.num_tensors());
  const int64_t n = g.numel();
  const size_t elem = dtype_size(g.dtype);
  for (int id : layout.tensors_in_chunk(chunk)) {
    const TensorSlot& slot = layout.slot(id);
    const int64_t b = std::max(slot.offset, begin);
    const int64_t e = std::min(slot.offset + slot.numel, begin + n);
    out[id] = b < e ? grad_norm_squared(static_cast<const std::byte*>(g.data) + (b - begin) * elem,
                                        g.dtype, e - b, threads)
                    : 0.0;
  }
}

}  // namespace tide
