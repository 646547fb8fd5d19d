#pragma once
// The CUDA kernels behind the op API (ops.h), one function per op, mirroring cpu_ops.h:
// ops.cpp checks shapes, dtypes and devices and then calls these with raw DEVICE pointers,
// so the functions here trust their arguments. Same conventions as ops.h: forward ops
// overwrite, backward ops accumulate (+=), except crossentropy_backward and
// crossentropy_forward_backward (overwrite, may alias).
//
// Every function queues its work on ctx.stream with ctx.handles (context.h) and returns:
// results are ready once that stream is synchronised. None of them synchronises the host or
// queries the device. Token and target ids are NOT checked here (that would need a copy back
// to the host per call): the data loader checks them once (DataLoader::check_vocab). An id
// outside the vocabulary gives NaN in the rows it touches instead of an out-of-bounds access
// (embedding_backward skips such tokens).
//
// Reproducibility: every result is a fixed function of the inputs and shapes (no
// floating-point atomics, reductions in fixed orders, cuBLAS without atomics), so repeated runs
// on the same GPU give the same bits. They are NOT bitwise equal to the CPU results (other
// summation orders, expf instead of glibc exp); the GPU tests compare within f32 tolerances.
//
// Storage: the float tensors of one call share one dtype, `dtype` (f32, bf16 or f16; ops.cpp
// checks it), passed as untyped pointers, except those 16-bit training keeps in another dtype,
// which come with their own: a matmul's output (f32 logits) and output gradient (their
// gradient), and the parameter gradients of the weight-gradient ops (`grad_dtype`: f32
// gradients beside 16-bit activations). The statistics (mean, rstd, losses) are float* in
// every dtype. The kernels compute in f32 and round a 16-bit result to nearest-even once, as
// the CPU reference does.
//
// Built into the CUDA module (core/cuda_module.h); ops.cpp reaches these through the module's
// CudaKernelTable (cuda_table.h). C++17-clean and free of CUDA headers.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tide/kernels/ops.h"

namespace tide::cuda {

// Number of GPUs visible to the process (0 without a driver or a GPU); queried once
// (core/device_cuda.cu).
int device_count();
// make_op_context for Device::cuda(device) (context.cu): checks that the GPU is visible, sets
// it current, creates the stream and the handles. `copies_only` (make_copy_context): the stream
// alone, without cuBLAS handles or their workspace.
OpContext make_context(int device, Arena* scratch, bool copies_only);

// The mover's CUDA half (mover.cu; kernels/mover.h): copies and zeroing queued on ctx's stream,
// events on it, and the host's waits.
void copy_async(const OpContext& ctx, void* dst, const void* src, size_t bytes);
void fill_zero_async(const OpContext& ctx, void* p, size_t bytes);
// dst = src converted (f32, bf16, f16; rounded to nearest-even), both device memory.
void convert_async(const OpContext& ctx, void* dst, DType dst_dtype, const void* src,
                   DType src_dtype, int64_t n);
// A cudaEvent_t recorded on ctx's stream, destroyed with the last copy of the pointer.
std::shared_ptr<void> record_event(const OpContext& ctx);
void wait_event(const OpContext& ctx, void* event);
void synchronize_event(void* event);
void synchronize_stream(const OpContext& ctx);

// out(B,T,C) = wte[tokens(B,T)] + wpe[t]; a token outside [0, V) gives a NaN row.
void embedding_forward(const OpContext& ctx, DType dtype, void* out, const int32_t* tokens,
                       const void* wte, const void* wpe, int B, int T, int C, int V);
// dwte(V,C) += scatter of dout rows by token, dwpe(T,C) += sum over b of dout; dwte and dwpe
// in grad_dtype.
void embedding_backward(const OpContext& ctx, DType dtype, DType grad_dtype, void* dwte, void* dwpe,
                        const void* dout, const int32_t* tokens, int B, int T, int C, int V);

// out(N,C), mean(N), rstd(N) from inp(N,C), weight(C), bias(C).
void layernorm_forward(const OpContext& ctx, DType dtype, void* out, float* mean, float* rstd,
                       const void* inp, const void* weight, const void* bias, int64_t N, int C);
// res(N,C) = a + b (the residual stream), then out, mean, rstd: the layernorm of res.
void residual_layernorm_forward(const OpContext& ctx, DType dtype, void* res, void* out,
                                float* mean, float* rstd, const void* a, const void* b,
                                const void* weight, const void* bias, int64_t N, int C);
void layernorm_backward_input(const OpContext& ctx, DType dtype, void* dinp, const void* dout,
                              const void* inp, const void* weight, const float* mean,
                              const float* rstd, int64_t N, int C);
// dweight and dbias in grad_dtype.
void layernorm_backward_weight(const OpContext& ctx, DType dtype, DType grad_dtype, void* dweight,
                               void* dbias, const void* dout, const void* inp, const float* mean,
                               const float* rstd, int64_t N, int C);

// out(N,C), rstd(N) from inp(N,C), weight(C): out = inp * rstd * weight,
// rstd = 1/sqrt(mean(inp^2) + eps). Backward: dinp(N,C) += ..., dweight(C) += ... (dweight in
// grad_dtype).
void rmsnorm_forward(const OpContext& ctx, DType dtype, void* out, float* rstd, const void* inp,
                     const void* weight, int64_t N, int C, float eps);
void rmsnorm_backward_input(const OpContext& ctx, DType dtype, void* dinp, const void* dout,
                            const void* inp, const void* weight, const float* rstd, int64_t N,
                            int C);
void rmsnorm_backward_weight(const OpContext& ctx, DType dtype, DType grad_dtype, void* dweight,
                             const void* dout, const void* inp, const float* rstd, int64_t N,
                             int C);

// out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC); bias may be null; out in out_dtype.
void matmul_forward(const OpContext& ctx, DType dtype, DType out_dtype, void* out, const void* inp,
                    const void* weight, const void* bias, int64_t N, int C, int OC);
// dinp(N,C) += dout(N,OC) @ weight(OC,C); dout in dout_dtype.
void matmul_backward_input(const OpContext& ctx, DType dtype, DType dout_dtype, void* dinp,
                           const void* dout, const void* weight, int64_t N, int C, int OC);
// dweight(OC,C) += dout^T @ inp, dbias(OC) += column sums of dout (dbias may be null); dout in
// dout_dtype, dweight and dbias in grad_dtype.
void matmul_backward_weight(const OpContext& ctx, DType dtype, DType dout_dtype, DType grad_dtype,
                            void* dweight, void* dbias, const void* dout, const void* inp,
                            int64_t N, int C, int OC);

// qkv(B,T,W) -> out(B,T,C), W = (NH + 2*NKV) * HS, C = NH * HS (rows [q | k | v], query head h
// reading kv head h / (NH/NKV)); lse(B,NH,T) f32, each row's log-sum-exp of the scaled scores.
// Uses scratch for q, k, v (kv heads repeated per query head) and the output in (B,NH,T,HS)
// layout, and the f32 scores and probabilities (B,NH,T,T) twice.
void attention_forward(const OpContext& ctx, DType dtype, void* out, float* lse, const void* qkv,
                       int B, int T, int C, int NH, int NKV, const DropoutSpec& dropout);
// dqkv(B,T,W) += gradient of out w.r.t. qkv, the probabilities recomputed from the scores and
// lse. Uses scratch for q, k, v, dout, dq, dk, dv in (B,NH,T,HS) layout and three (B,NH,T,T)
// f32 buffers (probabilities, after dropout, score gradient); a kv head's dk, dv sum over its
// query heads in head order.
void attention_backward(const OpContext& ctx, DType dtype, void* dqkv, const void* dout,
                        const void* qkv, const float* lse, int B, int T, int C, int NH, int NKV,
                        const DropoutSpec& dropout);

// RoPE on qkv rows (B,T,(NH + 2*NKV)*HS): q and k heads turned by t * inv_freq(HS/2) (HF's
// rotate_half pairs), v copied; out may alias inp. rope_backward: dinp += dout turned back.
void rope_forward(const OpContext& ctx, DType dtype, void* out, const void* inp,
                  const float* inv_freq, int B, int T, int NH, int NKV, int HS);
void rope_backward(const OpContext& ctx, DType dtype, void* dinp, const void* dout,
                   const float* inv_freq, int B, int T, int NH, int NKV, int HS);

void gelu_forward(const OpContext& ctx, DType dtype, void* out, const void* inp, int64_t n);
void gelu_backward(const OpContext& ctx, DType dtype, void* dinp, const void* dout, const void* inp,
                   int64_t n);
// out(N,I) = silu(gate) * up, gate = inp(N,2I)[:, 0:I], up = inp[:, I:2I];
// swiglu_backward: dinp(N,2I) += the gradients of gate and up.
void swiglu_forward(const OpContext& ctx, DType dtype, void* out, const void* inp, int64_t N,
                    int I);
void swiglu_backward(const OpContext& ctx, DType dtype, void* dinp, const void* dout,
                     const void* inp, int64_t N, int I);
void residual_forward(const OpContext& ctx, DType dtype, void* out, const void* a, const void* b,
                      int64_t n);
void residual_backward(const OpContext& ctx, DType dtype, void* da, void* db, const void* dout,
                       int64_t n);
// x(n) = x / divisor, IEEE division in f32, rounded once (divide_elements' bits).
void divide_by(const OpContext& ctx, DType dtype, void* x, float divisor, int64_t n);
// out(B,T,W) = inp * mask / (1-p), counters from the spec's global coordinates; out may
// alias inp. dropout_backward: dinp(B,T,W) += dout * mask / (1-p).
void dropout_forward(const OpContext& ctx, DType dtype, void* out, const void* inp, int64_t B,
                     int64_t T, int64_t W, const DropoutSpec& dropout);
void dropout_backward(const OpContext& ctx, DType dtype, void* dinp, const void* dout, int64_t B,
                      int64_t T, int64_t W, const DropoutSpec& dropout);

// losses(N) = logsumexp(logits row) - logits[target]; targets < 0 give loss 0, targets >= V
// give NaN (and a NaN gradient row).
void crossentropy_forward(const OpContext& ctx, DType dtype, float* losses, const void* logits,
                          const int32_t* targets, int64_t N, int V);
// dlogits(N,V) = (softmax - onehot) * dloss, overwritten; dlogits may alias logits.
void crossentropy_backward(const OpContext& ctx, DType dtype, void* dlogits, const void* logits,
                           const int32_t* targets, int64_t N, int V, float dloss);
// Both in one kernel, with their bits; dlogits may alias logits.
void crossentropy_forward_backward(const OpContext& ctx, DType dtype, float* losses, void* dlogits,
                                   const void* logits, const int32_t* targets, int64_t N, int V,
                                   float dloss);

// Tensor parallelism's vocabulary-parallel ends and sequence parallelism's row permutation
// (tensor_parallel.cu; the host side and its CPU kernels in model/vocab_parallel.h and
// model/block.cpp). Each tensor comes with its own dtype (the CPU kernels take any mix); the
// cross-entropy's statistics (max, sum, losses) are f32.
//
// out(N,C) = wte_shard[token - v0] for tokens in [v0, v0 + rows), 0 for the other ranks' tokens,
// NaN for a token outside [0, vocab).
void vocab_parallel_embedding_forward(const OpContext& ctx, DType out_dtype, DType wte_dtype,
                                      void* out, const int32_t* tokens, const void* wte_shard,
                                      int64_t N, int64_t C, int64_t v0, int64_t rows,
                                      int64_t vocab);
// dwte_shard(rows,C) += the dout(N,C) rows of this rank's tokens, each row's in ascending n.
void vocab_parallel_embedding_backward(const OpContext& ctx, DType dout_dtype, DType grad_dtype,
                                       void* dwte_shard, const void* dout, const int32_t* tokens,
                                       int64_t N, int64_t C, int64_t v0, int64_t rows);
// out(B,T,C) += wpe[pos0 + t].
void add_position_embedding(const OpContext& ctx, DType out_dtype, DType wpe_dtype, void* out,
                            const void* wpe, int64_t B, int64_t T, int64_t C, int64_t pos0);
// dwpe(T,C) += sum over b = 0..B-1 (in order) of dout(B,T,C).
void position_embedding_backward(const OpContext& ctx, DType dout_dtype, DType grad_dtype,
                                 void* dwpe, const void* dout, int64_t B, int64_t T, int64_t C);
// The vocabulary-parallel cross-entropy's three kernels, between its two collectives:
// 1. local_max(N) = max over the row of logits(N,V) (this rank's columns).
void vocab_parallel_ce_row_max(const OpContext& ctx, DType dtype, float* local_max,
                               const void* logits, int64_t N, int64_t V);
// 2. max(N) = max over the ranks of gathered(world,N); reduced(2,N) = [sum over the row of
//    exp(logit - max) | the target's logit if this rank holds its column, else 0].
void vocab_parallel_ce_partials(const OpContext& ctx, DType dtype, float* max, float* reduced,
                                const void* logits, const int32_t* targets, const float* gathered,
                                int world, int64_t N, int64_t V, int64_t v0);
// 3. sum(N) = reduced[0]; losses(N) = max + log(sum) - target logit (0 where target < 0).
void vocab_parallel_ce_losses(const OpContext& ctx, float* losses, float* sum, const float* reduced,
                              const float* max, const int32_t* targets, int64_t N);
// dlogits(N,V) = (exp(logit - max) / sum - onehot(target - v0)) * dloss, 0 where target < 0;
// overwritten; may alias logits (same dtype).
void vocab_parallel_crossentropy_backward(const OpContext& ctx, DType dtype, DType dlogits_dtype,
                                          void* dlogits, const void* logits, const int32_t* targets,
                                          const float* max, const float* sum, int64_t N, int64_t V,
                                          int64_t v0, float dloss);
// Sequence parallelism's row permutation of a (B, t*Ts, C) activation: whole -> rank-major
// (t, B, Ts, C) (to_rank_major), or back; elem_size bytes per element, dst != src.
void permute_sequence_rows(const OpContext& ctx, void* dst, const void* src, size_t elem_size,
                           int64_t t, int64_t B, int64_t Ts, int64_t C, bool to_rank_major);

}  // namespace tide::cuda
