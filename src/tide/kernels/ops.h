#pragma once
// The op API: every computation of a GPT-2 or Llama-family forward and backward pass, as free
// functions over Tensor views. Each op dispatches on the tensors' device to cpu:: (OpenMP +
// OpenBLAS, the readable reference) or cuda:: (fused kernels, cuBLASLt; in the CUDA module,
// reached through the context).
//
// Conventions (the same as llm.c):
//  * Shapes: B batch, T time (sequence), C channels (n_embd), NH heads, HS = C/NH head size,
//    NKV kv heads (grouped-query attention), I the SwiGLU width, V vocabulary, OC output
//    channels, N = B*T rows.
//  * Forward ops overwrite their outputs.
//  * Backward ops ACCUMULATE (+=) into every gradient they write, input gradients included.
//    Gradient accumulation over micro-batches and the residual stream both rely on this;
//    zero a gradient buffer before the first micro-batch of a step.
//  * Linear layers split their backward into backward_input ("B", needed right away by the
//    layer below) and backward_weight ("W", can be deferred) — the split that zero-bubble
//    pipeline schedules exploit. layernorm and rmsnorm are split the same way.
//  * Storage: every float tensor may be f32, bf16 or f16, each on its own (bf16 activations
//    with f32 weights, say), except the statistics (layernorm's mean and rstd, rmsnorm's rstd,
//    cross-entropy's losses), which are f32. The CPU kernels compute in f32 whatever the storage
//    and round each written 16-bit tensor to nearest-even once (cpu/f32_buffer.h); backward ops
//    accumulate into a 16-bit gradient the same way. The CUDA kernels take the same dtypes
//    and rounding, one dtype per call plus the mixes of 16-bit training: on a device (a GPU,
//    or the simulated one) the operands of an op share one dtype, except a matmul's output and
//    output gradient and the weight-gradient ops' parameter gradients (ops.cpp, kOwnFloat); any
//    other mix is refused, naming both tensors.

#include <cstdint>
#include <functional>
#include <memory>

#include "tide/core/arena.h"
#include "tide/core/rng.h"
#include "tide/core/tensor.h"

namespace tide {

// The CUDA handles of a context (stream-bound cuBLAS/cuBLASLt handles, their workspace, a
// device scratch buffer). Defined in kernels/cuda/context.h; opaque here so that code without
// CUDA headers can hold a context.
struct CudaHandles;
// The CUDA module's kernels (kernels/cuda_table.h), loaded by the first make_op_context for a GPU.
struct CudaKernelTable;
// A stream of the simulated device (core/sim_device.h).
class SimStream;

// Execution context of an op: everything it needs besides its tensors, passed explicitly.
// On the CPU a default OpContext{} will do. On a GPU make it with make_op_context: the device
// is set once there, and every op queues its work on ctx.stream with ctx.handles (no global
// or thread-local state, no per-op device query). Copies share the stream and the handles;
// work meant for another stream needs another make_op_context (handles belong to one stream).
struct OpContext {
  Device device = Device::cpu();
  Arena* scratch = nullptr;               // host scratch for CPU ops (rewound when the op returns)
  void* stream = nullptr;                 // cudaStream_t the ops are queued on; nullptr on the CPU
  std::shared_ptr<CudaHandles> handles;   // nullptr on the CPU
  const CudaKernelTable* cuda = nullptr;  // the kernels the ops call; nullptr on the CPU
  std::shared_ptr<SimStream> sim;         // the simulated device's stream; nullptr elsewhere
  // On a GPU: the attention op may run cuDNN's fused attention where it applies (16-bit, no
  // dropout; cuda/attention_cudnn.h). false: always tide's own kernels, the CPU's arithmetic.
  bool fused_attention = true;
};

// The context of ops on `device`. CPU: {cpu, scratch}. SIM: a new stream of the simulated
// device (a worker thread whose CPU kernels use `threads` OpenMP threads; 0: OpenMP's default);
// its ops are asynchronous as on a GPU. CUDA: makes `device` the calling
// thread's current device, creates a non-blocking stream, cuBLAS and cuBLASLt handles bound
// to it, a 32 MiB workspace and a growable device scratch buffer; they are released (after the
// stream drains) with the last copy of the context. Ops on a CUDA context are asynchronous:
// their results are ready once ctx.stream is synchronised (or waited on by another stream).
// The first call for a GPU loads the CUDA module (core/cuda_module.h). Throws a one-line
// tide::Error when no such GPU is visible, the build has no CUDA or the module cannot be loaded.
// Ops assume the thread that calls them has ctx.device current (true on the thread that made
// the context; another thread calls cudaSetDevice first).
OpContext make_op_context(Device device, Arena* scratch = nullptr, int threads = 0);

// Runs `kernel`, host code that reads or writes tensors on ctx's device, as a CPU kernel of that
// context: now on the CPU, queued on the stream on sim:N (so it is ordered with the ops around
// it, and the host waits for it as for any op). On a GPU it cannot run: a tide::Error says that
// `what` has no CUDA kernel yet. For the engine's work between ops that has no op of its own
// yet (the per-tensor gradient sums).
void run_cpu_kernel_on(const OpContext& ctx, const char* what, std::function<void()> kernel);

// One dropout site and where a tensor sits in the step's global activation. The mask of an
// element depends only on its GLOBAL coordinates, so a recomputation, a data-parallel rank, an
// accumulation split, a tensor- or sequence-parallel shard all draw, for the same element, the
// mask of the plain single-rank run. The element at counter k (formulas below) is kept when
// PhiloxStream{seed, stream}.uniform(k) >= p, and kept elements are scaled by 1/(1-p).
// The defaults (seq0 = pos0 = col0 = 0, seq_stride = T, width_full = W or NH) describe a tensor
// that is the whole activation. The ops reject coordinates outside the global activation
// (negative values, pos0 + T > seq_stride, col0 + W > width_full). For attention, u is the key
// position: the op holds all keys 0..T-1 of its queries.
struct DropoutSpec {
  float p = 0.0f;       // probability of zeroing; 0 disables dropout
  uint64_t seed = 0;    // run seed
  uint64_t stream = 0;  // rng_stream_id(step, layer, site): one stream per site and step
  // Global coordinates. An activation (B,T,W) holds sequences seq0..seq0+B-1 of the step's
  // global batch, positions pos0..pos0+T-1 of each, and features col0..col0+W-1 of the
  // unsharded width width_full. Element (b,t,j) is counter
  //   ((seq0 + b) * seq_stride + pos0 + t) * width_full + col0 + j
  // For attention probabilities (B,NH,T,T), width_full/col0 count heads and the element
  // (b,h,t,u) is counter (((seq0 + b) * width_full + col0 + h) * seq_stride + pos0 + t) *
  // seq_stride + u.
  uint64_t seq0 = 0;
  int64_t pos0 = 0;
  int64_t seq_stride = 0;  // positions per sequence (the full sequence length); 0 = the tensor's T
  int64_t width_full = 0;  // unsharded width (features, or heads for attention); 0 = the tensor's
  int64_t col0 = 0;
  bool enabled() const { return p > 0.0f; }
};

// ---- embedding -------------------------------------------------------------------------
// Token ids (and cross-entropy targets) must lie in [0, V). The CPU kernels throw on a bad one;
// the CUDA kernels do not copy ids back to check them (a host round trip per op) and give NaN
// rows instead: the data loader validates every shard once (DataLoader::check_vocab).
// out(B,T,C) = wte[tokens(B,T)] + wpe[t]
void embedding_forward(const OpContext& ctx, Tensor out, Tensor tokens, Tensor wte, Tensor wpe);
// dwte(V,C) += scatter of dout rows by token; dwpe(maxT,C) += sum over batch of dout
void embedding_backward(const OpContext& ctx, Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens);

// ---- layernorm (eps 1e-5) --------------------------------------------------------------
// out(N,C), mean(N), rstd(N) from inp(N,C), weight(C), bias(C)
void layernorm_forward(const OpContext& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor inp,
                       Tensor weight, Tensor bias);
// The residual connection and the next layernorm, fused: res(N,C) = a + b, then out, mean,
// rstd = layernorm_forward of res. The bits of residual_forward then layernorm_forward; on a
// GPU one kernel (one pass over the rows fewer), elsewhere those two ops.
void residual_layernorm_forward(const OpContext& ctx, Tensor res, Tensor out, Tensor mean,
                                Tensor rstd, Tensor a, Tensor b, Tensor weight, Tensor bias);
// dinp(N,C) += d/dinp
void layernorm_backward_input(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor inp,
                              Tensor weight, Tensor mean, Tensor rstd);
// dweight(C) += sum(dout * xhat), dbias(C) += sum(dout)
void layernorm_backward_weight(const OpContext& ctx, Tensor dweight, Tensor dbias, Tensor dout,
                               Tensor inp, Tensor mean, Tensor rstd);

// ---- RMSNorm (Llama's: no mean, no bias; eps an argument, e.g. rms_norm_eps 1e-5) --------
// out(N,C), rstd(N) from inp(N,C), weight(C): out = inp * rstd * weight,
// rstd = 1/sqrt(mean(inp^2) + eps) (f32, saved for backward). eps >= 0 and finite.
void rmsnorm_forward(const OpContext& ctx, Tensor out, Tensor rstd, Tensor inp, Tensor weight,
                     float eps);
// dinp(N,C) += d/dinp
void rmsnorm_backward_input(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor inp,
                            Tensor weight, Tensor rstd);
// dweight(C) += sum over rows of dout * inp * rstd
void rmsnorm_backward_weight(const OpContext& ctx, Tensor dweight, Tensor dout, Tensor inp,
                             Tensor rstd);

// ---- linear: out = inp @ weight^T + bias (weight stored (OC,C) as in PyTorch) ------------
// out(N,OC) from inp(N,C), weight(OC,C), bias(OC) (bias may be undefined)
void matmul_forward(const OpContext& ctx, Tensor out, Tensor inp, Tensor weight, Tensor bias);
// dinp(N,C) += dout(N,OC) @ weight(OC,C)
void matmul_backward_input(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor weight);
// dweight(OC,C) += dout^T @ inp, dbias(OC) += column sums of dout (dbias may be undefined)
void matmul_backward_weight(const OpContext& ctx, Tensor dweight, Tensor dbias, Tensor dout,
                            Tensor inp);

// ---- causal multi-head self-attention core, grouped-query included ----------------------
// qkv(B,T,W) rows hold [q: n_head*HS | k: n_kv_head*HS | v: n_kv_head*HS], W =
// (n_head + 2*n_kv_head) * HS; query head h reads kv head h / (n_head/n_kv_head) (grouped-query
// attention, n_kv_head dividing n_head; transformers' repeat_kv). With n_kv_head == n_head this
// is GPT-2's qkv(B,T,3C) (c_attn's q, k, v side by side), C = n_head * HS.
// out(B,T,C) = att @ v, att = softmax(q k^T / sqrt(HS)) with the causal mask, after dropout.
// lse(B,NH,T), f32 whatever the storage: each row's log-sum-exp of the scaled scores, which is
// all the backward needs besides qkv (it recomputes the probabilities and the mask); the
// (B,NH,T,T) probabilities are never kept (as flash attention).
// Dropout counters follow DropoutSpec's attention rule (width_full/col0 count query heads).
void attention_forward(const OpContext& ctx, Tensor out, Tensor lse, Tensor qkv, int n_head,
                       int n_kv_head, const DropoutSpec& dropout);
// dqkv(B,T,W) += gradient; uses the forward's lse (same dropout spec). A kv head's gradient sums
// over its query heads in head order.
void attention_backward(const OpContext& ctx, Tensor dqkv, Tensor dout, Tensor qkv, Tensor lse,
                        int n_head, int n_kv_head, const DropoutSpec& dropout);
// Multi-head attention (n_kv_head = n_head), qkv(B,T,3C).
void attention_forward(const OpContext& ctx, Tensor out, Tensor lse, Tensor qkv, int n_head,
                       const DropoutSpec& dropout);
void attention_backward(const OpContext& ctx, Tensor dqkv, Tensor dout, Tensor qkv, Tensor lse,
                        int n_head, const DropoutSpec& dropout);

// ---- rotary position embedding (RoPE, Llama's) -------------------------------------------
// qkv(B,T,W) rows laid out [q: n_head*HS | k: n_kv_head*HS | v: n_kv_head*HS] (n_kv_head
// dividing n_head; equal for multi-head attention). In every q and k head the pairs
// (i, i + HS/2) (HF's rotate_half convention, not interleaved) turn by the angle t * inv_freq[i]
// at sequence position t = 0..T-1, computed in f32 as transformers does (f32 product, then cos
// and sin); the v heads are copied unchanged. inv_freq(HS/2) is f32, from rope_inv_freq
// (rope_freq.h). out may alias inp.
void rope_forward(const OpContext& ctx, Tensor out, Tensor inp, Tensor inv_freq, int n_head,
                  int n_kv_head);
// dinp(B,T,W) += dout turned by the negative angle (v: += dout).
void rope_backward(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor inv_freq, int n_head,
                   int n_kv_head);

// ---- pointwise -------------------------------------------------------------------------
// GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu_forward(const OpContext& ctx, Tensor out, Tensor inp);
void gelu_backward(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor inp);
// SwiGLU (Llama's MLP activation): inp(N,2I) or (B,T,2I) holds gate = the first I columns of
// each row and up = the last I; out(N,I) = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
void swiglu_forward(const OpContext& ctx, Tensor out, Tensor inp);
// dinp(N,2I) += [dout * up * silu'(gate) | dout * silu(gate)], dout(N,I)
void swiglu_backward(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor inp);
// out = a + b (all the same shape)
void residual_forward(const OpContext& ctx, Tensor out, Tensor a, Tensor b);
// da += dout, db += dout
void residual_backward(const OpContext& ctx, Tensor da, Tensor db, Tensor dout);
// x = x / divisor, in x's dtype (the mean of a sum over `divisor` ranks: the bits of the
// process groups' ReduceOp::Avg, core/dtype.h's divide_elements, on any device).
void divide_by(const OpContext& ctx, Tensor x, float divisor);
// out = inp * mask / (1-p), mask = uniform(counter) >= p (inverted dropout; counters from the
// global coordinates, see DropoutSpec). inp is (B,T,W), or (N,W) read as (1,N,W): one
// "sequence" of N rows, so with seq0 = pos0 = 0 and seq_stride = T a flattened (B*T,W) view
// draws the mask of the (B,T,W) tensor. out may alias inp.
void dropout_forward(const OpContext& ctx, Tensor out, Tensor inp, const DropoutSpec& dropout);
// dinp += dout * mask / (1-p), the mask regenerated from the spec (same shapes as forward).
void dropout_backward(const OpContext& ctx, Tensor dinp, Tensor dout, const DropoutSpec& dropout);

// ---- fused softmax + cross-entropy -----------------------------------------------------
// logits(B,T,V), targets(B,T) int32 -> losses(B,T) = -log softmax(logits)[target].
// Targets < 0 are ignored (loss 0, no gradient).
void crossentropy_forward(const OpContext& ctx, Tensor losses, Tensor logits, Tensor targets);
// dlogits(B,T,V) = (softmax(logits) - onehot(target)) * dloss, with one scalar dloss
// (typically 1/(B*T*grad_accum)). The one op that OVERWRITES its gradient, so that dlogits
// may alias logits (the (B,T,V) buffer is the largest activation; it is reused in place).
void crossentropy_backward(const OpContext& ctx, Tensor dlogits, Tensor logits, Tensor targets,
                           float dloss);
// The two above in one op, for a training step that knows dloss at its forward (the fused
// classifier): losses and dlogits with the bits of crossentropy_forward then
// crossentropy_backward, in one pass over the rows (the backward's, whose row maximum and sum
// give the loss); dlogits may alias logits.
void crossentropy_forward_backward(const OpContext& ctx, Tensor losses, Tensor dlogits,
                                   Tensor logits, Tensor targets, float dloss);

}  // namespace tide
