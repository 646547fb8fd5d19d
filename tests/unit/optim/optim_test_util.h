#pragma once
// Helpers shared by the optimizer tests: 64-byte aligned buffers and random optimizer state.

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "tide/core/dtype.h"
#include "tide/core/rng.h"

namespace tide::test {

// A 64-byte aligned array (what arenas and chunks hand out), so streaming stores can be used.
template <typename T>
struct Aligned {
  explicit Aligned(int64_t n)
      : n(n), p(static_cast<T*>(std::aligned_alloc(64, ((n * sizeof(T) + 63) / 64 + 1) * 64))) {}
  ~Aligned() { std::free(p); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  T* data() const { return p; }
  T& operator[](int64_t i) const { return p[i]; }
  int64_t n;
  T* p;
};

// Master, grads, m and v with realistic magnitudes: master ~ N(0,1), grad ~ N(0,1)*gscale,
// m ~ N(0,0.1), v ~ |N(0,0.01)| (v is a running mean of squares: never negative).
struct State {
  explicit State(int64_t n, uint64_t seed = 1, float gscale = 1.0f)
      : n(n), master(n), grad(n), m(n), v(n) {
    PhiloxStream r{seed, 7};
    for (int64_t i = 0; i < n; ++i) {
      master[i] = r.normal(4 * i);
      grad[i] = r.normal(4 * i + 1) * gscale;
      m[i] = 0.1f * r.normal(4 * i + 2);
      const float x = 0.1f * r.normal(4 * i + 3);
      v[i] = x * x;
    }
  }
  int64_t n;
  Aligned<float> master, grad, m, v;
};

inline void copy(const Aligned<float>& from, Aligned<float>& to) {
  std::memcpy(to.data(), from.data(), from.n * sizeof(float));
}

inline bool same_bits(const float* a, const float* b, int64_t n, int64_t* first = nullptr) {
  for (int64_t i = 0; i < n; ++i)
    if (f32_bits(a[i]) != f32_bits(b[i])) {
      if (first) *first = i;
      return false;
    }
  return true;
}

}  // namespace tide::test
