#include "tide/parallel/optimizer_step.h"

#include <algorithm>

#include "tide/optim/adamw_cpu.h"

namespace tide {

void adamw_step_chunk(ChunkStore& store, int c, const float* grad, const AdamWHyper& hyper,
                      const AdamWStep& step, int threads) {
  const ChunkLayout& lay = store.layout();
  AdamWCpuOptions opt;
  opt.check = FiniteCheck::kCheckedByCaller;
  opt.threads = threads;
  // Under ZeRO only the owned slice of each chunk is updated (slice() of every kind is the
  // same element range); otherwise the whole chunk.
  const bool sliced = store.sliced(ChunkKind::MASTER);
  auto range = [&](ChunkKind k) { return sliced ? store.slice(k, c) : store.chunk(k, c); };
  const Tensor master = range(ChunkKind::MASTER);
  const int64_t lo = sliced ? store.options().group_rank * lay.slice_elems(c) : 0;
  const int64_t hi = lo + master.numel();
  // The gradients in the store's compute dtype (f32, bf16 or f16), or the caller's f32 copy.
  const Tensor store_grad = range(ChunkKind::GRAD);
  const DType g_dtype = grad ? DType::F32 : store_grad.dtype;
  const auto* g = static_cast<const std::byte*>(grad ? grad : store_grad.data);
  // A MASTER of its own (16-bit compute, or ZeRO-Offload's) leaves the compute-precision
  // parameters to write: in the same pass when the update runs on the store's own gradients
  // (offload copies its master into PARAM itself, on the compute thread).
  const bool own_master = store.compute_dtype() != DType::F32 || store.options().separate_master;
  const Tensor param = range(ChunkKind::PARAM);
  auto* p = own_master && !grad ? static_cast<std::byte*>(param.data) : nullptr;
  float* m = range(ChunkKind::ADAM_M).f32();
  float* v = range(ChunkKind::ADAM_V).f32();
  for (int id : lay.tensors_in_chunk(c)) {
    const TensorSlot& s = lay.slot(id);
    const int64_t b = std::max(s.offset, lo), e = std::min(s.offset + s.numel, hi);
    if (b >= e) continue;
    AdamWHyper h = hyper;
    if (!s.decay) h.weight_decay = 0.0;
    AdamWChunk a;
    a.master = master.f32() + (b - lo);
    a.grad = g + (b - lo) * dtype_size(g_dtype);
    a.grad_dtype = g_dtype;
    if (p) {
      a.param_out = p + (b - lo) * dtype_size(param.dtype);
      a.param_dtype = param.dtype;
    }
    a.m = m + (b - lo);
    a.v = v + (b - lo);
    a.n = e - b;
    (void)adamw_cpu(a, h, step, opt);
  }
}

void adamw_step(ChunkStore& store, const AdamWHyper& hyper, const AdamWStep& step) {
  for (int c = 0; c < store.layout().num_chunks(); ++c)
    adamw_step_chunk(store, c, nullptr, hyper, step);
}

}  // namespace tide
