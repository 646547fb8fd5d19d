#include "tide/parallel/tensor_grad_sums.h"

#include <algorithm>

#include "tide/core/error.h"
#include "tide/optim/grad_norm.h"
#include "tide/optim/grad_norm_cuda.h"

namespace tide {

void tensor_grad_sums(const ChunkLayout& layout, int chunk, const Tensor& g, int64_t begin,
                      std::span<double> out, int threads) {
  TIDE_ASSERT(static_cast<int64_t>(out.size()) == layout.num_tensors());
  const int64_t n = g.numel();
  const size_t elem = dtype_size(g.dtype);
  for (int id : layout.tensors_in_chunk(chunk)) {
    const TensorSlot& slot = layout.slot(id);
    const int64_t b = std::max(slot.offset, begin);
    const int64_t e = std::min(slot.offset + slot.norm_numel, begin + n);
    out[id] = b < e ? grad_norm_squared(static_cast<const std::byte*>(g.data) + (b - begin) * elem,
                                        g.dtype, e - b, threads)
                    : 0.0;
  }
}

void tensor_grad_sums(const OpContext& op, const ChunkLayout& layout, int chunk, const Tensor& g,
                      int64_t begin, double* out, double* scratch) {
  TIDE_CHECK(g.device == op.device,
             "gradient sums on {}: the gradients are on {}; sum them with a context for their "
             "device",
             op.device.str(), g.device.str());
  if (!op.device.is_cuda()) {
    const int64_t n = layout.num_tensors();
    run_cpu_kernel_on(op, "gradient sums", [&layout, chunk, g, begin, out, n] {
      tensor_grad_sums(layout, chunk, g, begin, std::span<double>(out, static_cast<size_t>(n)));
    });
    return;
  }
  const size_t elem = dtype_size(g.dtype);
  for (int id : layout.tensors_in_chunk(chunk)) {
    const TensorSlot& slot = layout.slot(id);
    const int64_t b = std::max(slot.offset, begin);
    const int64_t e = std::max(b, std::min(slot.offset + slot.norm_numel, begin + g.numel()));
    grad_norm_squared_cuda(static_cast<const std::byte*>(g.data) + (b - begin) * elem, g.dtype,
                           e - b, out + id, scratch, op.stream);
  }
}

int64_t tensor_grad_scratch_doubles(const ChunkLayout& layout) {
  return grad_norm_scratch_doubles(layout.max_tensor_elems());
}

}  // namespace tide
