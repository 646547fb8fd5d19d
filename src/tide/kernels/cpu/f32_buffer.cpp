#include "tide/kernels/cpu/f32_buffer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tide/core/error.h"

namespace tide::cpu {

namespace {

// Freed working copies, kept per thread for the next op (every op's copies are freed when it
// returns, and a training step asks for the same sizes again and again). Without it each copy
// is fresh memory from the OS, and on the 2-core VM the page faults of a bf16 GELU cost 5x its
// f32 arithmetic (bench/RESULTS.md). At most kPoolBlocks blocks and kPoolBytes per thread.
constexpr size_t kPoolBlocks = 8;
constexpr size_t kPoolBytes = size_t{256} << 20;

struct Block {
  float* p = nullptr;
  size_t capacity = 0;  // floats
};

class Pool {
 public:
  ~Pool() {
    for (Block& b : free_) std::free(b.p);
  }
  // The smallest kept block of at least n floats, or a new one.
  Block take(size_t n) {
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i].capacity >= n &&
          (best == free_.size() || free_[i].capacity < free_[best].capacity))
        best = i;
    if (best < free_.size()) {
      const Block b = free_[best];
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
      bytes_ -= b.capacity * sizeof(float);
      return b;
    }
    auto* p = static_cast<float*>(std::malloc(std::max<size_t>(n, 1) * sizeof(float)));
    TIDE_CHECK(p != nullptr, "cannot allocate {} bytes for an f32 working copy", n * sizeof(float));
    return Block{p, n};
  }
  // Keeps b, dropping the smallest kept blocks beyond the limits.
  void give(Block b) {
    if (b.capacity * sizeof(float) > kPoolBytes) {
      std::free(b.p);
      return;
    }
    free_.push_back(b);
    bytes_ += b.capacity * sizeof(float);
    while (free_.size() > kPoolBlocks || bytes_ > kPoolBytes) {
      size_t smallest = 0;
      for (size_t i = 1; i < free_.size(); ++i)
        if (free_[i].capacity < free_[smallest].capacity) smallest = i;
      bytes_ -= free_[smallest].capacity * sizeof(float);
      std::free(free_[smallest].p);
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(smallest));
    }
  }

 private:
  std::vector<Block> free_;
  size_t bytes_ = 0;
};

Pool& pool() {
  thread_local Pool p;
  return p;
}

// Conversions are cheap per element: split only tensors large enough to pay for the threads.
constexpr int64_t kParallelFrom = 1 << 16;

// dst = src widened to f32, src bf16 or f16. One loop per dtype: the bf16 one vectorises (the
// f16 conversion is a function call).
void widen(float* dst, const Tensor& src) {
  const int64_t n = src.numel();
  const uint16_t* s = src.u16();
  if (src.dtype == DType::BF16) {
#pragma omp parallel for simd if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
    return;
  }
#pragma omp parallel for if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
}

// dst (bf16 or f16) = src rounded to nearest-even.
void narrow(const Tensor& dst, const float* src) {
  const int64_t n = dst.numel();
  uint16_t* d = dst.u16();
  if (dst.dtype == DType::BF16) {
#pragma omp parallel for simd if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
    return;
  }
#pragma omp parallel for if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
}

}  // namespace

F32Buffer::F32Buffer(const Tensor& t, bool widen_it) : t_(t) {
  if (!t.defined()) return;
  if (t.dtype == DType::F32) {
    p_ = t.f32();
    return;
  }
  TIDE_ASSERT(t.dtype == DType::BF16 || t.dtype == DType::F16);
  const auto n = static_cast<size_t>(t.numel());
  const Block b = pool().take(n);
  copy_ = p_ = b.p;
  copy_capacity_ = b.capacity;
  if (widen_it) {
    widen(p_, t);
  } else {
    std::memset(p_, 0, n * sizeof(float));
  }
}

F32Buffer::~F32Buffer() {
  if (copy_ != nullptr) pool().give(Block{copy_, copy_capacity_});
}

void F32Buffer::store() const {
  if (copy_ != nullptr) narrow(t_, p_);
}

}  // namespace tide::cpu
