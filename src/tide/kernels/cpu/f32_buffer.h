#pragma once
// f32 working copies for the CPU kernels, so every op takes bf16, f16 and f32 storage.
//
// Why: the CPU kernels are the reference of mixed precision. They read a tensor's storage,
// compute in f32 and write its storage, rounded to nearest-even, once per op (PyTorch's and
// the GPU kernels' rule). A tensor already in f32 is used in place; a 16-bit one is widened
// into an f32 copy and, when the kernel writes it, rounded back by store(). Backward ops
// accumulate (+=) into a 16-bit gradient as into an f32 one: the widened copy starts from the
// stored values. Made inside the kernel lambda, so on the simulated device the copy is taken
// on the stream's worker, after the ops before it. The copies' memory comes from a small
// per-thread pool of earlier copies (f32_buffer.cpp): fresh pages cost more than the widening.

#include <cstddef>

#include "tide/core/tensor.h"

namespace tide::cpu {

class F32Buffer {
 public:
  // `t` may be undefined (an optional bias): get() is then nullptr. widen = false for an output
  // the kernel overwrites whole (ops.h: forward ops): the copy starts zeroed instead of widened.
  explicit F32Buffer(const Tensor& t, bool widen = true);
  ~F32Buffer();
  F32Buffer(const F32Buffer&) = delete;
  F32Buffer& operator=(const F32Buffer&) = delete;
  float* get() const { return p_; }
  // Rounds the working copy back into a 16-bit tensor (nothing for f32: it was written in
  // place). Call it for every tensor the kernel writes.
  void store() const;

 private:
  Tensor t_;
  float* copy_ = nullptr;  // the pool's block, or nullptr (f32: in place)
  size_t copy_capacity_ = 0;
  float* p_ = nullptr;
};

}  // namespace tide::cpu
