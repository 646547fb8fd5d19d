#pragma once
// Element types and their conversions. bf16 and f16 are stored as raw 16-bit patterns;
// conversions from f32 round to nearest, ties to even (what GPUs and PyTorch do), and keep
// NaN a NaN and overflow an infinity.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tide {

enum class DType : uint8_t { F32, BF16, F16, I32, U16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::BF16:
    case DType::F16:
    case DType::U16:
      return 2;
  }
  return 0;
}

std::string_view dtype_name(DType t);
// Parses "f32"/"fp32"/"float32", "bf16"/"bfloat16", "f16"/"fp16"/"float16"; throws otherwise.
DType parse_dtype(std::string_view s);

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bfloat16: the top 16 bits of an f32. Rounding adds 0x7FFF plus the lowest kept bit
// (ties to even); a NaN keeps its sign and becomes a quiet NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  return bits_f32(static_cast<uint32_t>(h) << 16);
}

// IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Largest finite 65504.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

// Element-wise loops over host buffers of a float dtype (f32, bf16, f16; others are a clear
// error). Each element is widened to f32, computed in f32 and rounded to nearest-even once
// (NCCL's and the GPU kernels' rule for 16-bit sums); f32 is computed as it is.
bool is_float_dtype(DType t);
// dst = src converted (a copy when the dtypes are the same).
void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
// dst[i] = a[i] + b[i]; dst may be a or b (the process groups' sums: comm/mpi_ring_ops.cpp).
void add_elements(DType t, void* dst, const void* a, const void* b, int64_t n);
// x[i] = x[i] / d: the mean of a sum over d ranks (ReduceOp::Avg; f32 bit for bit `x /
// float(d)`).
void divide_elements(void* x, DType t, int64_t n, float d);
// x[i] = x[i] / d rounded to t's precision, held in f32: for x widened from t, bit for bit
// divide_elements in t, widened (ZeRO-Offload's f32 host copy of 16-bit gradients).
void divide_elements_rounded(float* x, int64_t n, float d, DType t);

// Small tagged wrappers so templates can tell the 16-bit formats apart.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};
inline float to_f32(float x) {
  return x;
}
inline float to_f32(bf16 x) {
  return bf16_to_f32(x.bits);
}
inline float to_f32(f16 x) {
  return f16_to_f32(x.bits);
}

}  // namespace tide
