#pragma once
// The CPU reference kernels: plain f32 loops parallelised with OpenMP, GEMMs through OpenBLAS.
// ops.cpp checks shapes, dtypes and devices and then calls these with raw pointers, so the
// functions here trust their arguments (llm.c style). Conventions are those of ops.h:
// forward ops overwrite, backward ops accumulate (+=), except crossentropy_backward and
// crossentropy_forward_backward (overwrite, may alias).
//
// Reproducibility: every result is independent of the number of OpenMP threads. Work is split
// so that each output element is written by one thread, and every sum runs in a fixed order
// (no `reduction` clauses, no per-thread partial sums combined in thread order).

#include <cstdint>

#include "tide/kernels/ops.h"

namespace tide::cpu {

// out(B,T,C) = wte[tokens(B,T)] + wpe[t]; tokens must lie in [0, V) (throws otherwise).
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, int V);
// dwte(V,C) += scatter of dout rows by token, dwpe(T,C) += sum over b of dout.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int V);

// out(N,C), mean(N), rstd(N) from inp(N,C), weight(C), bias(C).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int C);
void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                              const float* mean, const float* rstd, int64_t N, int C);
void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int64_t N, int C);

// out(N,C), rstd(N) from inp(N,C), weight(C): out = inp * rstd * weight,
// rstd = 1/sqrt(mean(inp^2) + eps).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int C, float eps);
// dinp(N,C) += rstd * (g - xhat * mean(g * xhat)), g = dout * weight, xhat = inp * rstd.
void rmsnorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                            const float* rstd, int64_t N, int C);
// dweight(C) += sum over rows of dout * inp * rstd.
void rmsnorm_backward_weight(float* dweight, const float* dout, const float* inp, const float* rstd,
                             int64_t N, int C);

// out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC); bias may be null.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int C, int OC);
// dinp(N,C) += dout(N,OC) @ weight(OC,C)
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N, int C,
                           int OC);
// dweight(OC,C) += dout^T @ inp, dbias(OC) += column sums of dout (dbias may be null).
void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t N, int C, int OC);
// dbias(OC) += column sums of dout(N,OC).
void matmul_bias_gradient(float* dbias, const float* dout, int64_t N, int OC);
// The three ops on the storage as it is, through the native bf16 GEMM (cpu/gemm_bf16.h): taken
// (true) when bf16_gemm_path() is not the reference and the matrices (the two factors and the
// output or gradient written) are bf16 or f32, not both factors f32 (gemm_bf16_takes; on
// kAvx512Bf16 both factors bf16); false,
// with nothing done, otherwise. The bias and dbias may have any float dtype.
bool matmul_forward_native(const Tensor& out, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias, int64_t N, int C, int OC);
bool matmul_backward_input_native(const Tensor& dinp, const Tensor& dout, const Tensor& weight,
                                  int64_t N, int C, int OC);
bool matmul_backward_weight_native(const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                                   const Tensor& inp, int64_t N, int C, int OC);

// qkv(B,T,W) -> out(B,T,C), W = (NH + 2*NKV) * HS, C = NH * HS (rows [q | k | v], query head h
// reading kv head h / (NH/NKV)); lse(B,NH,T) the log-sum-exp of each row's scaled scores (what
// the backward needs besides qkv); dropout on the probabilities (counters by the spec's
// attention rule).
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       int NKV, const DropoutSpec& dropout);
// dqkv(B,T,W) += gradient of out w.r.t. qkv, from the forward's lse.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, int B,
                        int T, int C, int NH, int NKV, const DropoutSpec& dropout);

// RoPE (HF's rotate_half pairs (i, i+HS/2)) on qkv rows (B,T,W), W = (NH + 2*NKV) * HS laid
// out [q heads | k heads | v heads]: q and k heads turned by t * inv_freq(HS/2), v copied; out
// may alias inp. rope_backward: dinp(B,T,W) += dout turned by the negative angle (v: + dout).
void rope_forward(float* out, const float* inp, const float* inv_freq, int B, int T, int NH,
                  int NKV, int HS);
void rope_backward(float* dinp, const float* dout, const float* inv_freq, int B, int T, int NH,
                   int NKV, int HS);

void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n);
void residual_forward(float* out, const float* a, const float* b, int64_t n);
void residual_backward(float* da, float* db, const float* dout, int64_t n);
// out(N,I) = silu(gate) * up with gate = inp(N,2I)[:, 0:I], up = inp[:, I:2I];
// swiglu_backward: dinp(N,2I) += the gradients of gate and up.
void swiglu_forward(float* out, const float* inp, int64_t N, int I);
void swiglu_backward(float* dinp, const float* dout, const float* inp, int64_t N, int I);
// out(B,T,W) = inp * mask / (1-p), counters from the spec's global coordinates; out may
// alias inp. dropout_backward: dinp(B,T,W) += dout * mask / (1-p).
void dropout_forward(float* out, const float* inp, int64_t B, int64_t T, int64_t W,
                     const DropoutSpec& dropout);
void dropout_backward(float* dinp, const float* dout, int64_t B, int64_t T, int64_t W,
                      const DropoutSpec& dropout);

// losses(N) = logsumexp(logits row) - logits[target]; targets < 0 give loss 0.
// Targets >= V throw.
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N,
                          int V);
// dlogits(N,V) = (softmax - onehot) * dloss, overwritten; dlogits may alias logits.
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int64_t N,
                           int V, float dloss);
// Both in one pass over the rows, with their bits; dlogits may alias logits.
void crossentropy_forward_backward(float* losses, float* dlogits, const float* logits,
                                   const int32_t* targets, int64_t N, int V, float dloss);

}  // namespace tide::cpu
