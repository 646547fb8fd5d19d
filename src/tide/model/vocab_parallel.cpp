#include "tide/model/vocab_parallel.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "tide/core/error.h"

namespace tide {

namespace {

void check_host(const Tensor& t, const char* who) {
  TIDE_CHECK(t.device.is_cpu(),
             "{}: the vocabulary-parallel ops run on host tensors only (no CUDA kernels yet); "
             "run tensor parallelism on the CPU",
             who);
}

}  // namespace

void vocab_parallel_embedding_forward(Tensor out, Tensor tokens, Tensor wte_shard, int64_t v0,
                                      int64_t vocab) {
  check_host(out, "vocab_parallel_embedding_forward");
  const int64_t N = tokens.numel(), C = wte_shard.dim(1), rows = wte_shard.dim(0);
  TIDE_ASSERT(out.numel() == N * C);
  const int32_t* tok = tokens.i32();
  for (int64_t n = 0; n < N; ++n)
    TIDE_CHECK(tok[n] >= 0 && tok[n] < vocab,
               "vocab_parallel_embedding_forward: token {} at position {} is outside the "
               "vocabulary [0, {})",
               tok[n], n, vocab);
  const float* w = wte_shard.f32();
  float* o = out.f32();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = tok[n] - v0;
    if (row >= 0 && row < rows)
      std::memcpy(o + n * C, w + row * C, static_cast<size_t>(C) * 4);
    else
      std::memset(o + n * C, 0, static_cast<size_t>(C) * 4);
  }
}

void vocab_parallel_embedding_backward(Tensor dwte_shard, Tensor dout, Tensor tokens, int64_t v0) {
  check_host(dout, "vocab_parallel_embedding_backward");
  const int64_t N = tokens.numel(), C = dwte_shard.dim(1), rows = dwte_shard.dim(0);
  const int32_t* tok = tokens.i32();
  const float* d = dout.f32();
  float* g = dwte_shard.f32();
  // Parallel over channels; within a channel rows are visited in (b,t) order (deterministic).
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = tok[n] - v0;
      if (row >= 0 && row < rows) g[row * C + c] += d[n * C + c];
    }
}

void add_position_embedding(Tensor out, Tensor wpe, int64_t pos0) {
  check_host(out, "add_position_embedding");
  const int64_t B = out.dim(0), T = out.dim(1), C = out.dim(2);
  float* o = out.f32();
  const float* p = wpe.f32();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) o[(b * T + t) * C + c] += p[(pos0 + t) * C + c];
}

void position_embedding_backward(Tensor dwpe, Tensor dout) {
  check_host(dout, "position_embedding_backward");
  const int64_t B = dout.dim(0), T = dout.dim(1), C = dout.dim(2);
  const float* d = dout.f32();
  float* g = dwpe.f32();
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c) g[t * C + c] += d[(b * T + t) * C + c];
}

void vocab_parallel_crossentropy_forward(ProcessGroup& tp, Tensor losses, Tensor max, Tensor sum,
                                         Tensor logits, Tensor targets, int64_t v0,
                                         Arena& scratch) {
  check_host(logits, "vocab_parallel_crossentropy_forward");
  const int64_t V = logits.dim(2), N = logits.dim(0) * logits.dim(1);
  const int world = tp.size();
  const float* x = logits.f32();
  const int32_t* tgt = targets.i32();
  // 1. Row maxima: all-gather the local ones, take the largest.
  float* local = scratch.alloc_tensor({N}).f32();
  float* gathered = scratch.alloc_tensor({N * world}).f32();
  float* reduced = scratch.alloc_tensor({2 * N}).f32();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < V; ++v) m = std::max(m, x[n * V + v]);
    local[n] = m;
  }
  tp.all_gather(Tensor(local, {N}), Tensor(gathered, {N * world}));
  float* mx = max.f32();
  for (int64_t n = 0; n < N; ++n) {
    float m = gathered[n];
    for (int r = 1; r < world; ++r) m = std::max(m, gathered[r * N + n]);
    mx[n] = m;
  }
  // 2. [sum of exp(logit - max) | the target's logit] over this rank's columns, summed.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    double s = 0.0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(x[n * V + v] - mx[n]));
    reduced[n] = static_cast<float>(s);
    const int64_t col = tgt[n] - v0;
    reduced[N + n] = (tgt[n] >= 0 && col >= 0 && col < V) ? x[n * V + col] : 0.0f;
  }
  tp.all_reduce(Tensor(reduced, {2 * N}));
  float* sm = sum.f32();
  float* loss = losses.f32();
  for (int64_t n = 0; n < N; ++n) {
    sm[n] = reduced[n];
    const double lse = static_cast<double>(mx[n]) + std::log(static_cast<double>(reduced[n]));
    loss[n] = tgt[n] < 0 ? 0.0f : static_cast<float>(lse - static_cast<double>(reduced[N + n]));
  }
}

size_t vocab_parallel_crossentropy_scratch(int64_t N, int tp) {
  return Arena::aligned(static_cast<size_t>(N) * 4) * (3 + static_cast<size_t>(tp));
}

void vocab_parallel_crossentropy_backward(Tensor dlogits, Tensor logits, Tensor targets, Tensor max,
                                          Tensor sum, int64_t v0, float dloss) {
  check_host(logits, "vocab_parallel_crossentropy_backward");
  const int64_t V = logits.dim(2), N = logits.dim(0) * logits.dim(1);
  const float* x = logits.f32();
  float* dx = dlogits.f32();
  const int32_t* tgt = targets.i32();
  const float* mx = max.f32();
  const float* sm = sum.f32();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    if (tgt[n] < 0) {
      for (int64_t v = 0; v < V; ++v) dx[n * V + v] = 0.0f;
      continue;
    }
    const float scale = static_cast<float>(1.0 / sm[n]) * dloss;
    for (int64_t v = 0; v < V; ++v) dx[n * V + v] = std::exp(x[n * V + v] - mx[n]) * scale;
    const int64_t col = tgt[n] - v0;
    if (col >= 0 && col < V) dx[n * V + col] -= dloss;
  }
}

}  // namespace tide
