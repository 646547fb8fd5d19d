#include "tide/estimate/model_states.h"

#include <algorithm>

#include "tide/core/error.h"

namespace tide {

ModelStateBytes bytes_per_parameter(Precision precision, Optimizer optimizer) {
  ModelStateBytes k;
  k.param16 = bytes_per_param(precision);
  k.grads = bytes_per_param(precision);
  // Mixed precision keeps an fp32 master copy for the update; fp32 updates param16 itself.
  k.master = precision == Precision::FP32 ? 0 : 4;
  const int64_t state_bytes = optimizer == Optimizer::AdamW ? 4 : 0;  // fp32 m and v
  k.adam_m = state_bytes;
  k.adam_v = state_bytes;
  return k;
}

ModelStateBytes zero_model_states(int64_t psi, int zero_stage, int dp, Precision precision,
                                  Optimizer optimizer) {
  TIDE_ASSERT(psi >= 0 && dp >= 1 && zero_stage >= 0 && zero_stage <= 3);
  const ModelStateBytes k = bytes_per_parameter(precision, optimizer);
  const int64_t part = (psi + dp - 1) / dp;  // one rank's partition
  // Stage 1 partitions the optimizer states, stage 2 also the grads, stage 3 also the params.
  const int64_t opt_elems = zero_stage >= 1 ? part : psi;
  const int64_t grad_elems = zero_stage >= 2 ? part : psi;
  const int64_t param_elems = zero_stage >= 3 ? part : psi;
  ModelStateBytes r;
  r.param16 = param_elems * k.param16;
  r.grads = grad_elems * k.grads;
  r.master = opt_elems * k.master;
  r.adam_m = opt_elems * k.adam_m;
  r.adam_v = opt_elems * k.adam_v;
  return r;
}

std::vector<ParamTensor> stage_param_tensors(const GPTConfig& model, int tp, int pp, int stage) {
  TIDE_ASSERT(tp >= 1 && pp >= 1 && stage >= 0 && stage < pp && model.n_layer % pp == 0);
  const int64_t C = model.n_embd, V = model.vocab_size, T = model.max_seq_len, t = tp;
  const int64_t vocab_rows = (V + t - 1) / t;
  std::vector<ParamTensor> out;
  if (stage == 0) {
    out.push_back({"wte", vocab_rows * C});  // (V/t, C) vocabulary-parallel
    out.push_back({"wpe", T * C});           // (T, C)
  }
  const int per_stage = model.n_layer / pp;
  for (int l = stage * per_stage; l < (stage + 1) * per_stage; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    out.push_back({p + "ln_1.weight", C});
    out.push_back({p + "ln_1.bias", C});
    out.push_back({p + "attn.c_attn.weight", 3 * C * C / t});  // column-parallel (3C/t, C)
    out.push_back({p + "attn.c_attn.bias", 3 * C / t});
    out.push_back({p + "attn.c_proj.weight", C * C / t});  // row-parallel (C, C/t)
    out.push_back({p + "attn.c_proj.bias", C});
    out.push_back({p + "ln_2.weight", C});
    out.push_back({p + "ln_2.bias", C});
    out.push_back({p + "mlp.c_fc.weight", 4 * C * C / t});  // column-parallel (4C/t, C)
    out.push_back({p + "mlp.c_fc.bias", 4 * C / t});
    out.push_back({p + "mlp.c_proj.weight", 4 * C * C / t});  // row-parallel (C, 4C/t)
    out.push_back({p + "mlp.c_proj.bias", C});
  }
  if (stage == pp - 1) {
    out.push_back({"ln_f.weight", C});
    out.push_back({"ln_f.bias", C});
    // The LM head is tied to wte; a last stage other than the first keeps its own copy, whose
    // gradient is summed with the first stage's (Megatron-LM).
    if (pp > 1) out.push_back({"lm_head (tied wte copy)", vocab_rows * C});
  }
  return out;
}

ChunkPlan plan_chunks(const std::vector<ParamTensor>& tensors, int64_t requested_chunk_elems,
                      int dp, int elem_bytes) {
  TIDE_ASSERT(!tensors.empty() && dp >= 1 && requested_chunk_elems >= 0);
  const ParamTensor* largest = &tensors.front();
  for (const ParamTensor& x : tensors)
    if (x.elems > largest->elems) largest = &x;
  TIDE_CHECK(requested_chunk_elems == 0 || requested_chunk_elems >= largest->elems,
             "chunk of {} elements is smaller than the tensor '{}' ({} elements), and a tensor "
             "never straddles two chunks; raise chunk_size_mb to at least {} (MiB of "
             "compute-precision parameters) or leave it 0 for automatic",
             requested_chunk_elems, largest->name, largest->elems,
             (largest->elems * elem_bytes + (1 << 20) - 1) >> 20);
  ChunkPlan plan;
  // A multiple of 16 elements keeps every fp32 chunk 64-byte aligned (as memory/ does).
  plan.chunk_elems = (std::max(requested_chunk_elems, largest->elems) + 15) / 16 * 16;
  int64_t used = 0;
  plan.chunks = 1;
  for (const ParamTensor& x : tensors) {
    if (used + x.elems > plan.chunk_elems) {  // does not fit: start the next chunk
      ++plan.chunks;
      used = 0;
    }
    used += x.elems;
    plan.payload_elems += x.elems;
  }
  plan.chunks_padded = (plan.chunks + dp - 1) / dp * dp;
  return plan;
}

}  // namespace tide
