#pragma once
// Small f32 loops shared by the CPU kernels, written so that the compiler vectorises them
// without -ffast-math while the result stays a fixed function of the inputs.

namespace tide::cpu {

// sum_i a[i] * b[i] with 8 partial sums (lane j takes the elements i = j mod 8) added in a
// fixed tree at the end. A single running sum cannot be vectorised (f32 addition is not
// associative, so the compiler must keep its order); 8 lanes fill one AVX register, and the
// order depends only on n, so the result is the same on every thread and every run.
inline float dot(const float* a, const float* b, int n) {
  float acc[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// y[i] += alpha * x[i]. x and y must not overlap (__restrict); blocks of 8 let -O2's cheap
// vectoriser turn the inner loop into one AVX operation with no alias checks or epilogue.
inline void axpy(float alpha, const float* __restrict x, float* __restrict y, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) y[i + j] += alpha * x[i + j];
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace tide::cpu
