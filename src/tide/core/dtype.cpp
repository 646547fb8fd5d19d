#include "tide/core/dtype.h"

#include <cmath>

#include "tide/core/error.h"

namespace tide {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::I32:
      return "i32";
    case DType::U16:
      return "u16";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::F32;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  if (s == "f16" || s == "fp16" || s == "float16") return DType::F16;
  TIDE_FAIL("unknown dtype '{}'; use one of f32, bf16, f16", s);
}

uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (x < 0x38800000u) {                                               // below 2^-14: subnormal
    if (x < 0x33000000u) return static_cast<uint16_t>(sign);           // below 2^-25: zero
    const uint32_t e = x >> 23;
    const uint32_t m = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // value in units of 2^-24 is m >> shift
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t r = x - 0x38000000u;  // re-bias the exponent from 127 to 15
  uint32_t h = r >> 13;
  const uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | h);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
  return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

namespace {

// How an element of each float dtype is stored, widened to f32 and rounded back: the one dtype
// dispatch of the element-wise loops below (outside their loops).
struct AsF32 {
  using T = float;
  static float load(float x) { return x; }
  static float store(float x) { return x; }
};
struct AsBf16 {
  using T = uint16_t;
  static float load(uint16_t h) { return bf16_to_f32(h); }
  static uint16_t store(float x) { return f32_to_bf16(x); }
};
struct AsF16 {
  using T = uint16_t;
  static float load(uint16_t h) { return f16_to_f32(h); }
  static uint16_t store(float x) { return f32_to_f16(x); }
};

template <class Fn>
void on_float_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32:
      return fn(AsF32{});
    case DType::BF16:
      return fn(AsBf16{});
    case DType::F16:
      return fn(AsF16{});
    default:
      TIDE_FAIL("{} is not a float dtype (f32, bf16 or f16)", dtype_name(t));
  }
}

}  // namespace

bool is_float_dtype(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype));
    return;
  }
  on_float_dtype(src_dtype, [&]<class S>(S) {
    on_float_dtype(dst_dtype, [&]<class D>(D) {
      const auto* x = static_cast<const typename S::T*>(src);
      auto* y = static_cast<typename D::T*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = D::store(S::load(x[i]));
    });
  });
}

void add_elements(DType t, void* dst, const void* a, const void* b, int64_t n) {
  on_float_dtype(t, [&]<class E>(E) {
    using T = typename E::T;
    T* d = static_cast<T*>(dst);
    const T* x = static_cast<const T*>(a);
    const T* y = static_cast<const T*>(b);
    for (int64_t i = 0; i < n; ++i) d[i] = E::store(E::load(x[i]) + E::load(y[i]));
  });
}

void divide_elements(void* x, DType t, int64_t n, float d) {
  on_float_dtype(t, [&]<class E>(E) {
    auto* p = static_cast<typename E::T*>(x);
    for (int64_t i = 0; i < n; ++i) p[i] = E::store(E::load(p[i]) / d);
  });
}

void divide_elements_rounded(float* x, int64_t n, float d, DType t) {
  on_float_dtype(t, [&]<class E>(E) {
    for (int64_t i = 0; i < n; ++i) x[i] = E::load(E::store(x[i] / d));
  });
}

}  // namespace tide
