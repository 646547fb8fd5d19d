#include "tide/model/vocab_parallel.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "tide/core/error.h"
#include "tide/kernels/cpu/f32_buffer.h"
#include "tide/kernels/cuda_table.h"
#include "tide/kernels/mover.h"
#include "tide/model/stream_collectives.h"

namespace tide {

namespace {

// The tensors of these ops are on the context's device: on a GPU the CUDA kernels
// (kernels/cuda/tensor_parallel.cu), elsewhere CPU kernels of `op` (run_cpu_kernel_on: at once
// on the CPU, queued on the simulated device's stream).
void check_on(const OpContext& op, const Tensor& t, const char* name, const char* who) {
  TIDE_CHECK(op.device.is_cuda() ? t.device == op.device : t.device.is_cpu() || t.device.is_sim(),
             "{}: tensor '{}' is on {} but the op runs on {}; move the tensor or run the op with a "
             "context for {}",
             who, name, t.device.str(), op.device.str(), t.device.str());
}

// The CUDA module's kernels of a GPU context (make_op_context put them there).
const CudaKernelTable& gpu_kernels(const OpContext& op, const char* who) {
  TIDE_CHECK(op.cuda != nullptr && op.handles != nullptr,
             "{}: the context says {} but has no CUDA stream or handles; make it with "
             "make_op_context(Device::cuda({}), ...)",
             who, op.device.str(), op.device.index);
  return *op.cuda;
}

// The statistics of the cross-entropy (max, sum, losses) are f32, as the ops' statistics are.
void check_f32(const Tensor& t, const char* name, const char* who) {
  TIDE_CHECK(t.dtype == DType::F32, "{}: '{}' is {}; the cross-entropy's statistics are f32", who,
             name, dtype_name(t.dtype));
}

}  // namespace

// The loops below read and write any float dtype the way the ops do (kernels/cpu/f32_buffer.h):
// a 16-bit tensor is widened to f32, computed on, and a written one rounded back once, so a
// 16-bit gradient accumulates as the single-rank embedding_backward accumulates it.

void vocab_parallel_embedding_forward(const OpContext& op, Tensor out, Tensor tokens,
                                      Tensor wte_shard, int64_t v0, int64_t vocab) {
  const char* who = "vocab_parallel_embedding_forward";
  check_on(op, out, "out", who);
  check_on(op, tokens, "tokens", who);
  check_on(op, wte_shard, "wte_shard", who);
  if (op.device.is_cuda()) {
    // A token outside [0, vocab) gives a NaN row there (no round trip to check it).
    gpu_kernels(op, who).vocab_parallel_embedding_forward(
        op, out.dtype, wte_shard.dtype, out.data, tokens.i32(), wte_shard.data, tokens.numel(),
        wte_shard.dim(1), v0, wte_shard.dim(0), vocab);
    return;
  }
  run_cpu_kernel_on(op, who, [=] {
    const int64_t N = tokens.numel(), C = wte_shard.dim(1), rows = wte_shard.dim(0);
    TIDE_ASSERT(out.numel() == N * C);
    const int32_t* tok = tokens.i32();
    for (int64_t n = 0; n < N; ++n)
      TIDE_CHECK(tok[n] >= 0 && tok[n] < vocab,
                 "vocab_parallel_embedding_forward: token {} at position {} is outside the "
                 "vocabulary [0, {})",
                 tok[n], n, vocab);
    // Row by row in the tensors' dtypes (a 16-bit row widens exactly; zero bits are 0 in every
    // float dtype).
    const auto* w = static_cast<const char*>(wte_shard.data);
    auto* o = static_cast<char*>(out.data);
    const size_t ws = dtype_size(wte_shard.dtype), os = dtype_size(out.dtype);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = tok[n] - v0;
      if (row >= 0 && row < rows)
        convert_elements(w + row * C * ws, wte_shard.dtype, o + n * C * os, out.dtype, C);
      else
        std::memset(o + n * C * os, 0, static_cast<size_t>(C) * os);
    }
  });
}

void vocab_parallel_embedding_backward(const OpContext& op, Tensor dwte_shard, Tensor dout,
                                       Tensor tokens, int64_t v0) {
  const char* who = "vocab_parallel_embedding_backward";
  check_on(op, dwte_shard, "dwte_shard", who);
  check_on(op, dout, "dout", who);
  check_on(op, tokens, "tokens", who);
  if (op.device.is_cuda()) {
    gpu_kernels(op, who).vocab_parallel_embedding_backward(
        op, dout.dtype, dwte_shard.dtype, dwte_shard.data, dout.data, tokens.i32(), tokens.numel(),
        dwte_shard.dim(1), v0, dwte_shard.dim(0));
    return;
  }
  run_cpu_kernel_on(op, who, [=] {
    const int64_t N = tokens.numel(), C = dwte_shard.dim(1), rows = dwte_shard.dim(0);
    const int32_t* tok = tokens.i32();
    const cpu::F32Buffer g_(dwte_shard), d_(dout);
    float* g = g_.get();
    const float* d = d_.get();
    // Parallel over channels; within a channel rows are visited in (b,t) order (deterministic).
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t row = tok[n] - v0;
        if (row >= 0 && row < rows) g[row * C + c] += d[n * C + c];
      }
    g_.store();
  });
}

void add_position_embedding(const OpContext& op, Tensor out, Tensor wpe, int64_t pos0) {
  const char* who = "add_position_embedding";
  check_on(op, out, "out", who);
  check_on(op, wpe, "wpe", who);
  if (op.device.is_cuda()) {
    gpu_kernels(op, who).add_position_embedding(op, out.dtype, wpe.dtype, out.data, wpe.data,
                                                out.dim(0), out.dim(1), out.dim(2), pos0);
    return;
  }
  run_cpu_kernel_on(op, who, [=] {
    const int64_t B = out.dim(0), T = out.dim(1), C = out.dim(2);
    const cpu::F32Buffer o_(out), p_(wpe);
    float* o = o_.get();
    const float* p = p_.get();
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) o[(b * T + t) * C + c] += p[(pos0 + t) * C + c];
    o_.store();
  });
}

void position_embedding_backward(const OpContext& op, Tensor dwpe, Tensor dout) {
  const char* who = "position_embedding_backward";
  check_on(op, dwpe, "dwpe", who);
  check_on(op, dout, "dout", who);
  if (op.device.is_cuda()) {
    gpu_kernels(op, who).position_embedding_backward(
        op, dout.dtype, dwpe.dtype, dwpe.data, dout.data, dout.dim(0), dout.dim(1), dout.dim(2));
    return;
  }
  run_cpu_kernel_on(op, who, [=] {
    const int64_t B = dout.dim(0), T = dout.dim(1), C = dout.dim(2);
    const cpu::F32Buffer g_(dwpe), d_(dout);
    float* g = g_.get();
    const float* d = d_.get();
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) g[t * C + c] += d[(b * T + t) * C + c];
    g_.store();
  });
}

void vocab_parallel_crossentropy_forward(const OpContext& op, ProcessGroup& tp, Tensor losses,
                                         Tensor max, Tensor sum, Tensor logits, Tensor targets,
                                         int64_t v0, Arena& scratch) {
  const char* who = "vocab_parallel_crossentropy_forward";
  for (const auto& [t, name] : {std::pair{losses, "losses"},
                                {max, "max"},
                                {sum, "sum"},
                                {logits, "logits"},
                                {targets, "targets"}})
    check_on(op, t, name, who);
  const int64_t V = logits.dim(2), N = logits.dim(0) * logits.dim(1);
  const int world = tp.size();
  check_f32(losses, "losses", who);
  check_f32(max, "max", who);
  check_f32(sum, "sum", who);
  // Three kernels between two collectives, each ordered after the stream's work so far
  // (model/stream_collectives.h).
  const Tensor local = scratch.alloc_tensor({N}), gathered = scratch.alloc_tensor({N * world}),
               reduced = scratch.alloc_tensor({2 * N});
  const CudaKernelTable* gpu = op.device.is_cuda() ? &gpu_kernels(op, who) : nullptr;
  // 1. Row maxima: all-gather the local ones, take the largest.
  if (gpu)
    gpu->vocab_parallel_ce_row_max(op, logits.dtype, local.f32(), logits.data, N, V);
  else
    run_cpu_kernel_on(op, who, [=] {
      const cpu::F32Buffer x_(logits);
      const float* x = x_.get();
      float* l = local.f32();
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t v = 0; v < V; ++v) m = std::max(m, x[n * V + v]);
        l[n] = m;
      }
    });
  collective_on_stream(op, tp, gathered, [&] { return tp.all_gather_async(local, gathered); });
  // 2. [sum of exp(logit - max) | the target's logit] over this rank's columns, summed.
  if (gpu)
    gpu->vocab_parallel_ce_partials(op, logits.dtype, max.f32(), reduced.f32(), logits.data,
                                    targets.i32(), gathered.f32(), world, N, V, v0);
  else
    run_cpu_kernel_on(op, who, [=] {
      const cpu::F32Buffer x_(logits);
      const float* x = x_.get();
      const float* g = gathered.f32();
      float* mx = max.f32();
      float* r = reduced.f32();
      const int32_t* tgt = targets.i32();
      for (int64_t n = 0; n < N; ++n) {
        float m = g[n];
        for (int w = 1; w < world; ++w) m = std::max(m, g[w * N + n]);
        mx[n] = m;
      }
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0.0;
        for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(x[n * V + v] - mx[n]));
        r[n] = static_cast<float>(s);
        const int64_t col = tgt[n] - v0;
        r[N + n] = (tgt[n] >= 0 && col >= 0 && col < V) ? x[n * V + col] : 0.0f;
      }
    });
  collective_on_stream(op, tp, reduced, [&] { return tp.all_reduce_async(reduced); });
  // 3. The losses.
  if (gpu)
    gpu->vocab_parallel_ce_losses(op, losses.f32(), sum.f32(), reduced.f32(), max.f32(),
                                  targets.i32(), N);
  else
    run_cpu_kernel_on(op, who, [=] {
      const float* r = reduced.f32();
      const float* mx = max.f32();
      const int32_t* tgt = targets.i32();
      float* sm = sum.f32();
      float* loss = losses.f32();
      for (int64_t n = 0; n < N; ++n) {
        sm[n] = r[n];
        const double lse = static_cast<double>(mx[n]) + std::log(static_cast<double>(r[n]));
        loss[n] = tgt[n] < 0 ? 0.0f : static_cast<float>(lse - static_cast<double>(r[N + n]));
      }
    });
}

size_t vocab_parallel_crossentropy_scratch(int64_t N, int tp) {
  return Arena::aligned(static_cast<size_t>(N) * 4) * (3 + static_cast<size_t>(tp));
}

void vocab_parallel_crossentropy_backward(const OpContext& op, Tensor dlogits, Tensor logits,
                                          Tensor targets, Tensor max, Tensor sum, int64_t v0,
                                          float dloss) {
  const char* who = "vocab_parallel_crossentropy_backward";
  for (const auto& [t, name] : {std::pair{dlogits, "dlogits"},
                                {logits, "logits"},
                                {targets, "targets"},
                                {max, "max"},
                                {sum, "sum"}})
    check_on(op, t, name, who);
  check_f32(max, "max", who);
  check_f32(sum, "sum", who);
  if (op.device.is_cuda()) {
    // In place (dlogits aliasing logits) reads each element before it writes it: one dtype.
    TIDE_CHECK(dlogits.data != logits.data || dlogits.dtype == logits.dtype,
               "{}: dlogits aliases logits but is {} where they are {}; in place needs one dtype",
               who, dtype_name(dlogits.dtype), dtype_name(logits.dtype));
    gpu_kernels(op, who).vocab_parallel_crossentropy_backward(
        op, logits.dtype, dlogits.dtype, dlogits.data, logits.data, targets.i32(), max.f32(),
        sum.f32(), logits.dim(0) * logits.dim(1), logits.dim(2), v0, dloss);
    return;
  }
  run_cpu_kernel_on(op, who, [=] {
    const int64_t V = logits.dim(2), N = logits.dim(0) * logits.dim(1);
    // dlogits may alias logits: x_ is then a widened copy, dx_ a zeroed one (written whole).
    const cpu::F32Buffer x_(logits), dx_(dlogits, /*widen=*/false);
    const float* x = x_.get();
    float* dx = dx_.get();
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
    dx_.store();
  });
}

}  // namespace tide
