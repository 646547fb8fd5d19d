#include "tide/parallel/optimizer_step.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "tide/optim/adamw_cpu.h"
#include "tide/optim/adamw_cuda.h"

namespace tide {

void adamw_step_chunk(const OpContext& op, ChunkStore& store, int c, const float* grad,
                      const AdamWHyper& hyper, const AdamWStep& step, int threads) {
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
  // With the caller's copy neither GRAD nor PARAM is touched: ZeRO-Offload's update runs on its
  // worker thread while the compute thread attaches whole buffers over those chunks (DPU).
  const Tensor store_grad = grad ? Tensor() : range(ChunkKind::GRAD);
  const DType g_dtype = grad ? DType::F32 : store_grad.dtype;
  const auto* g = static_cast<const std::byte*>(grad ? grad : store_grad.data);
  // A MASTER of its own (16-bit compute, or ZeRO-Offload's) leaves the compute-precision
  // parameters to write: in the same pass when the update runs on the store's own gradients
  // (offload copies its master into PARAM itself, on the compute thread).
  const bool own_master = store.compute_dtype() != DType::F32 || store.options().separate_master;
  const Tensor param = own_master && !grad ? range(ChunkKind::PARAM) : Tensor();
  auto* p = static_cast<std::byte*>(param.data);
  float* m = range(ChunkKind::ADAM_M).f32();
  float* v = range(ChunkKind::ADAM_V).f32();
  TIDE_CHECK(master.device == op.device && (grad || store_grad.device == op.device),
             "AdamW on {}: the master weights are on {} and the gradients on {}; run it with a "
             "context for the device that holds them",
             op.device.str(), master.device.str(), grad ? "the host" : store_grad.device.str());
  // One fused call per tensor (its own weight decay), all in one task on the context's stream.
  std::vector<std::pair<AdamWChunk, AdamWHyper>> calls;
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
    calls.emplace_back(a, h);
  }
  if (op.device.is_cuda()) {
    for (const auto& [a, h] : calls) adamw_cuda(a, h, step, /*skip_flag=*/nullptr, op.stream);
    return;
  }
  run_cpu_kernel_on(op, "adamw_step", [calls = std::move(calls), step, opt] {
    for (const auto& [a, h] : calls) (void)adamw_cpu(a, h, step, opt);
  });
}

void adamw_step(const OpContext& op, ChunkStore& store, const AdamWHyper& hyper,
                const AdamWStep& step) {
  for (int c = 0; c < store.layout().num_chunks(); ++c)
    adamw_step_chunk(op, store, c, nullptr, hyper, step);
}

}  // namespace tide
