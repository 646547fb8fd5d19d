#pragma once
// Global gradient norm for clipping (torch.nn.utils.clip_grad_norm_) and the overflow check.
//
// grad_norm_squared sums g*g over one or many buffers in double. Each f32 square is exact in
// double (24-bit mantissa squared fits in 53 bits) and no sum of finite f32 squares can
// overflow a double, so the result is non-finite exactly when some gradient is NaN or Inf:
// this one read of the gradients is also the fp16 overflow check (see adamw_cpu.h).
//
// Deterministic: the elements are cut into fixed blocks of kNormBlock; each block is summed
// in a fixed order (8 interleaved accumulators, then combined pairwise), and the block sums
// are added in order. Which thread sums which block does not matter, so the result is
// bitwise the same for any number of threads.

#include <cstdint>
#include <span>
#include <vector>

#include "tide/core/dtype.h"

namespace tide {

constexpr int64_t kNormBlock = 8192;

struct GradBuffer {
  const void* data = nullptr;
  DType dtype = DType::F32;  // F32, BF16 or F16
  int64_t n = 0;
};

// Sum of squares over all buffers, in the order given. threads = 0: OpenMP's default.
double grad_norm_squared(std::span<const GradBuffer> buffers, int threads = 0);
double grad_norm_squared(const void* data, DType dtype, int64_t n, int threads = 0);

// PyTorch's clip_grad_norm_ factor: min(1, max_norm / (total_norm + 1e-6)). Multiply the
// gradients (AdamWStep::grad_scale) by it. Throws if max_norm <= 0 or total_norm is not
// finite (a non-finite norm means: skip the step, do not clip).
float clip_coefficient(double total_norm, double max_norm);

}  // namespace tide
