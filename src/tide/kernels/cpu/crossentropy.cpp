// Fused softmax + cross-entropy over the vocabulary, per row n of logits(N,V):
//   loss_n = logsumexp(logits_n) - logits_n[target_n]
//   dlogits_n = (softmax(logits_n) - onehot(target_n)) * dloss
// logsumexp subtracts the row maximum and sums the exponentials in double.
#include <cmath>

#include "tide/core/error.h"
#include "tide/kernels/cpu/cpu_ops.h"

namespace tide::cpu {

namespace {

struct RowStats {
  float maxval;
  double sum;  // sum_v exp(logit_v - maxval)
};

RowStats row_stats(const float* x, int V) {
  float maxval = -INFINITY;
  for (int v = 0; v < V; ++v) maxval = x[v] > maxval ? x[v] : maxval;
  double sum = 0.0;
  for (int v = 0; v < V; ++v) sum += std::exp(x[v] - maxval);
  return {maxval, sum};
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
    const RowStats st = row_stats(x, V);
    const double lse = static_cast<double>(st.maxval) + std::log(st.sum);
    losses[n] = static_cast<float>(lse - static_cast<double>(x[target]));
  }
}

void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int64_t N,
                           int V, float dloss) {
  check_targets(targets, N, V, "crossentropy_backward");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int32_t target = targets[n];
    const float* x = logits + n * V;  // (V)
    float* dx = dlogits + n * V;      // (V), may be the same memory as x
    if (target < 0) {
      for (int v = 0; v < V; ++v) dx[v] = 0.0f;
      continue;
    }
    // Three passes over the row, each reading x[v] before writing dx[v] (safe in place):
    // the maximum; e = exp(x - max), stored in dx and summed in double; the scaling to
    // softmax * dloss. Then the one-hot term: dx[target] -= dloss.
    float maxval = -INFINITY;
    for (int v = 0; v < V; ++v) maxval = x[v] > maxval ? x[v] : maxval;
    double sum = 0.0;
    for (int v = 0; v < V; ++v) {
      const float e = std::exp(x[v] - maxval);
      dx[v] = e;
      sum += e;
    }
    const float scale = static_cast<float>(1.0 / sum) * dloss;  // softmax = e / sum
    for (int v = 0; v < V; ++v) dx[v] *= scale;
    dx[target] -= dloss;
  }
}

}  // namespace tide::cpu
