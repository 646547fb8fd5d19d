#pragma once
// Helpers for the kernel tests: random buffers, Tensor views of std::vectors, and generic
// central-finite-difference gradient checks (of the f32 op, or of a float64 reference).
//
// The FD check: for a scalar loss L(x) (the forward run in f32, L summed in double, usually
// L = sum(out * R) with a fixed random R so that dL/dout = R), each element of x is perturbed
// by +-h and dL/dx_i ~ (L(x+h) - L(x-h)) / ((x+h) - (x-h)), where the denominator is the
// difference of the two f32 values actually stored (x+h rounds in f32).

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tide/core/rng.h"
#include "tide/core/tensor.h"
#include "tide/kernels/ops.h"

namespace tide::test {

inline std::vector<float> randn(int64_t n, uint64_t seed, float scale = 1.0f) {
  const PhiloxStream rng{seed, 7};
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * rng.normal(i);
  return v;
}

inline Tensor view(std::vector<float>& v, Shape s) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), s.numel());
  return Tensor(v.data(), s, DType::F32);
}
inline Tensor view(std::vector<int32_t>& v, Shape s) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), s.numel());
  return Tensor(v.data(), s, DType::I32);
}

// sum_i out[i] * r[i] in double.
inline double dot(const std::vector<float>& out, const std::vector<float>& r) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * r[i];
  return s;
}

struct FdTolerance {
  double h = 1e-3;
  double atol = 2e-3;
  double rtol = 1e-2;
};

// Compares `analytic` (dL/dx from a backward op) with central differences of `loss` w.r.t.
// every element of x. x is restored exactly afterwards. Returns the largest |error|.
inline double check_gradient(const std::string& name, std::vector<float>& x,
                             const std::vector<float>& analytic,
                             const std::function<double()>& loss, FdTolerance tol = {}) {
  EXPECT_EQ(x.size(), analytic.size()) << name;
  double max_err = 0.0;
  int failures = 0;
  // Hundreds of tiny forward calls: one thread avoids OpenMP start-up and wake-up costs that
  // dominate on a busy machine. (Thread-count independence is tested separately.)
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    const float xp = saved + static_cast<float>(tol.h);
    const float xm = saved - static_cast<float>(tol.h);
    x[i] = xp;
    const double lp = loss();
    x[i] = xm;
    const double lm = loss();
    x[i] = saved;
    const double fd = (lp - lm) / (static_cast<double>(xp) - static_cast<double>(xm));
    const double err = std::fabs(fd - analytic[i]);
    max_err = std::max(max_err, err);
    if (err > tol.atol + tol.rtol * std::fabs(fd) && failures++ < 5) {
      ADD_FAILURE() << name << "[" << i << "]: analytic " << analytic[i] << " vs finite "
                    << "difference " << fd << " (|error| " << err << ")";
    }
  }
  omp_set_num_threads(threads);
  return max_err;
}

// The fp64 check: central differences of a float64 loss (a reference forward written in
// double in the test, on exact copies of the op's f32 inputs) w.r.t. every element of x,
// against `analytic` from an f32 backward op. The differences carry no f32 rounding (their
// error is ~h^2 and ~1e-16 |L| / h), so the tolerance is the f32 op's own error.
struct Fd64Tolerance {
  double h = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-4;
};
inline double check_gradient_f64(const std::string& name, std::vector<double>& x,
                                 const std::vector<float>& analytic,
                                 const std::function<double()>& loss, Fd64Tolerance tol = {}) {
  EXPECT_EQ(x.size(), analytic.size()) << name;
  double max_err = 0.0;
  int failures = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + tol.h;
    const double lp = loss();
    x[i] = saved - tol.h;
    const double lm = loss();
    x[i] = saved;
    const double fd = (lp - lm) / (2 * tol.h);
    const double err = std::fabs(fd - analytic[i]);
    max_err = std::max(max_err, err);
    if (err > tol.atol + tol.rtol * std::fabs(fd) && failures++ < 5) {
      ADD_FAILURE() << name << "[" << i << "]: analytic " << analytic[i] << " vs fp64 finite "
                    << "difference " << fd << " (|error| " << err << ")";
    }
  }
  return max_err;
}

inline std::vector<double> to_f64(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

inline OpContext cpu_ctx() {
  return OpContext{};
}

}  // namespace tide::test

namespace tide::test {

// Backward ops accumulate: run `backward` on zeroed gradients, then again, and expect every
// gradient to double. Leaves the gradients of ONE call in place (for the FD check).
inline void expect_accumulates(const std::string& name, const std::function<void()>& backward,
                               const std::vector<std::vector<float>*>& grads) {
  for (auto* g : grads) std::fill(g->begin(), g->end(), 0.0f);
  backward();
  std::vector<std::vector<float>> once;
  for (auto* g : grads) once.push_back(*g);
  backward();
  for (size_t k = 0; k < grads.size(); ++k) {
    for (size_t i = 0; i < once[k].size(); ++i) {
      ASSERT_NEAR((*grads[k])[i], 2.0f * once[k][i], 1e-5f * (1.0f + std::fabs(once[k][i])))
          << name << ": gradient " << k << " element " << i << " does not accumulate";
    }
    *grads[k] = once[k];
  }
}

// Expects fn to throw a tide::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& fn,
                         std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a tide::Error containing '" << *parts.begin() << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg;
  }
}

}  // namespace tide::test
