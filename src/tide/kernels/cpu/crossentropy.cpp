// Fused softmax + cross-entropy over the vocabulary, per row n of logits(N,V):
//   loss_n = logsumexp(logits_n) - logits_n[target_n]
//   dlogits_n = (softmax(logits_n) - onehot(target_n)) * dloss
// logsumexp subtracts the row maximum and sums the exponentials in double.
// The rows are processed 8 logits at a time (simd.h): exp is most of this kernel's time.
// The last partial block of a row is padded with -inf, whose exp is 0.
// crossentropy_forward_backward is the training step's pair in one pass over the rows: the
// backward's passes, with the loss taken from their maximum and sum, which are the forward's
// (the same operations in the same order), so its bits are those of the two ops.
#include <cmath>

#include "tide/core/error.h"
#include "tide/kernels/cpu/cpu_ops.h"
#include "tide/kernels/cpu/simd.h"

namespace tide::cpu {

namespace {

struct RowStats {
  float maxval;
  double sum;  // sum_v exp(logit_v - maxval)
};

float row_max(const float* x, int V) {
  v8f m = splat(-INFINITY);
  int v = 0;
  for (; v + 8 <= V; v += 8) m = max8(load8(x + v), m);
  if (v < V) m = max8(load_partial(x + v, V - v, -INFINITY), m);
  return hmax8(m);
}

// e = exp(x - maxval) for 8 logits, added to the two double accumulators (lanes 0-3, 4-7).
inline v8f exp_and_add(v8f x, float maxval, v4d& lo, v4d& hi) {
  const v8f e = exp8(x - splat(maxval));
  lo += low4d(e);
  hi += high4d(e);
  return e;
}

RowStats row_stats(const float* x, int V) {
  const float maxval = row_max(x, V);
  v4d lo = {}, hi = {};
  int v = 0;
  for (; v + 8 <= V; v += 8) exp_and_add(load8(x + v), maxval, lo, hi);
  if (v < V) exp_and_add(load_partial(x + v, V - v, -INFINITY), maxval, lo, hi);
  return {maxval, hsum4d(lo, hi)};
}

void check_targets(const int32_t* targets, int64_t N, int V, const char* op) {
  for (int64_t n = 0; n < N; ++n) {
    TIDE_CHECK(targets[n] < V,
               "{}: target id {} at row {} is outside the vocabulary [0, {}) (negative targets "
               "mean 'ignore'); the data was tokenized with a larger vocabulary than the model's "
               "vocab_size, or it is corrupt",
               op, targets[n], n, V);
  }
}

// One row of the backward: dx = (softmax(x) - onehot(target)) * dloss, target >= 0, in three
// passes each reading x[v] before writing dx[v] (safe in place): the maximum; e = exp(x - max),
// stored in dx and summed in double; the scaling to softmax * dloss. Then the one-hot term.
// Returns the maximum and the sum (the forward's row_stats).
RowStats gradient_row(float* dx, const float* x, int V, int32_t target, float dloss) {
  const float maxval = row_max(x, V);
  v4d lo = {}, hi = {};
  int v = 0;
  for (; v + 8 <= V; v += 8) store8(dx + v, exp_and_add(load8(x + v), maxval, lo, hi));
  if (v < V) {
    const v8f e = exp_and_add(load_partial(x + v, V - v, -INFINITY), maxval, lo, hi);
    store_partial(dx + v, e, V - v);
  }
  const double sum = hsum4d(lo, hi);
  const float scale = static_cast<float>(1.0 / sum) * dloss;  // softmax = e / sum
  for (v = 0; v + 8 <= V; v += 8) store8(dx + v, load8(dx + v) * splat(scale));
  for (; v < V; ++v) dx[v] *= scale;
  dx[target] -= dloss;
  return {maxval, sum};
}

float loss_of(const RowStats& st, float target_logit) {
  const double lse = static_cast<double>(st.maxval) + std::log(st.sum);
  return static_cast<float>(lse - static_cast<double>(target_logit));
}

// The gradient of every row and, when `losses` is given, its loss (the fused op); dlogits may
// be the same memory as logits.
void gradient_rows(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                   int64_t N, int V, float dloss) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int32_t target = targets[n];
    const float* x = logits + n * V;  // (V)
    float* dx = dlogits + n * V;      // (V)
    if (target < 0) {
      if (losses != nullptr) losses[n] = 0.0f;
      for (int v = 0; v < V; ++v) dx[v] = 0.0f;
      continue;
    }
    const float target_logit = x[target];  // read before the row is overwritten
    const RowStats st = gradient_row(dx, x, V, target, dloss);
    if (losses != nullptr) losses[n] = loss_of(st, target_logit);
  }
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N,
                          int V) {
  check_targets(targets, N, V, "crossentropy_forward");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int32_t target = targets[n];
    if (target < 0) {
      losses[n] = 0.0f;
      continue;
    }
    const float* x = logits + n * V;  // (V)
    losses[n] = loss_of(row_stats(x, V), x[target]);
  }
}

void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int64_t N,
                           int V, float dloss) {
  check_targets(targets, N, V, "crossentropy_backward");
  gradient_rows(nullptr, dlogits, logits, targets, N, V, dloss);
}

void crossentropy_forward_backward(float* losses, float* dlogits, const float* logits,
                                   const int32_t* targets, int64_t N, int V, float dloss) {
  check_targets(targets, N, V, "crossentropy_forward_backward");
  gradient_rows(losses, dlogits, logits, targets, N, V, dloss);
}

}  // namespace tide::cpu
