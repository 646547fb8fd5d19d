#pragma once
// Tensor: a non-owning view of contiguous row-major memory (pointer, shape, dtype, device).
// Memory belongs to arenas and chunks; a Tensor never frees anything, so copying one is free.
// Shapes are written in comments the way llm.c does: (B,T,C) = batch, time, channels.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tide/core/device.h"
#include "tide/core/dtype.h"
#include "tide/core/error.h"

namespace tide {

constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) {
    TIDE_ASSERT(d.size() <= kMaxDims);
    for (int64_t x : d) dims[ndim++] = x;
  }
  int64_t operator[](int i) const { return dims[i < 0 ? ndim + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= dims[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (ndim != o.ndim) return false;
    for (int i = 0; i < ndim; ++i)
      if (dims[i] != o.dims[i]) return false;
    return true;
  }
  std::string str() const;  // "(2, 64, 128)"
};

struct Tensor {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::F32;
  Device device = Device::cpu();

  Tensor() = default;
  Tensor(void* p, Shape s, DType t = DType::F32, Device d = Device::cpu())
      : data(p), shape(s), dtype(t), device(d) {}

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i]; }
  int ndim() const { return shape.ndim; }
  bool defined() const { return data != nullptr; }

  // Typed access; checks the dtype so a bf16 buffer is never read as f32 by mistake.
  float* f32() const {
    TIDE_ASSERT(dtype == DType::F32);
    return static_cast<float*>(data);
  }
  int32_t* i32() const {
    TIDE_ASSERT(dtype == DType::I32);
    return static_cast<int32_t*>(data);
  }
  uint16_t* u16() const {
    TIDE_ASSERT(dtype_size(dtype) == 2);
    return static_cast<uint16_t*>(data);
  }
  // Same memory, new shape with the same number of elements.
  Tensor view(Shape s) const {
    TIDE_ASSERT(s.numel() == numel());
    return Tensor(data, s, dtype, device);
  }
};

// Throws a tide::Error naming the tensor if its shape is not `expected`.
void check_shape(const Tensor& t, const Shape& expected, const char* name);

}  // namespace tide
