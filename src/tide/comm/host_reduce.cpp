#include "tide/comm/host_reduce.h"

#include "tide/core/error.h"

namespace tide {

namespace {

// How an element of each reducible dtype is stored and widened to f32.
struct HostF32 {
  using T = float;
  static float load(float x) { return x; }
  static float store(float x) { return x; }
};
struct HostBf16 {
  using T = uint16_t;
  static float load(uint16_t h) { return bf16_to_f32(h); }
  static uint16_t store(float x) { return f32_to_bf16(x); }
};
struct HostF16 {
  using T = uint16_t;
  static float load(uint16_t h) { return f16_to_f32(h); }
  static uint16_t store(float x) { return f32_to_f16(x); }
};

template <class Fn>
void on_host_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32:
      return fn(HostF32{});
    case DType::BF16:
      return fn(HostBf16{});
    case DType::F16:
      return fn(HostF16{});
    default:
      TIDE_FAIL("host reductions take f32, bf16 or f16, not {}", dtype_name(t));
  }
}

}  // namespace

bool host_reducible(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

void host_add(DType t, void* dst, const void* a, const void* b, int64_t n) {
  on_host_dtype(t, [&]<class E>(E) {
    using T = typename E::T;
    T* d = static_cast<T*>(dst);
    const T* x = static_cast<const T*>(a);
    const T* y = static_cast<const T*>(b);
    for (int64_t i = 0; i < n; ++i) d[i] = E::store(E::load(x[i]) + E::load(y[i]));
  });
}

}  // namespace tide
