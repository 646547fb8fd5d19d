#pragma once
// The CUDA kernels behind the op API (ops.h), one function per op, mirroring cpu_ops.h:
// ops.cpp checks shapes, dtypes and devices and then calls these with raw DEVICE pointers,
// so the functions here trust their arguments. Same conventions as ops.h: forward ops
// overwrite, backward ops accumulate (+=), except crossentropy_backward (overwrites, may alias).
//
// `device` is the CUDA device index; the work is queued on the calling thread's current
// stream (context.h) and is asynchronous: it has finished only once that stream is
// synchronised. The exceptions are embedding_* and crossentropy_*, which check their token
// or target ids on the device and wait for that check (one round trip) so that a bad id
// raises the same tide::Error as on the CPU.
//
// Reproducibility: every result is a fixed function of the inputs and shapes (no
// floating-point atomics, reductions in fixed orders, cuBLAS without atomics), so repeated runs
// on the same GPU give the same bits. They are NOT bitwise equal to the CPU results (other
// summation orders, expf instead of glibc exp); the GPU tests compare within f32 tolerances.
//
// Only built with CUDA (TIDE_HAVE_CUDA). C++17-clean and free of CUDA headers.

#include <cstdint>

#include "tide/kernels/ops.h"

namespace tide::cuda {

// Number of GPUs visible to the process (0 without a driver or a GPU); queried once.
int device_count();

// out(B,T,C) = wte[tokens(B,T)] + wpe[t]; tokens must lie in [0, V) (throws otherwise).
void embedding_forward(int device, float* out, const int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C, int V);
// dwte(V,C) += scatter of dout rows by token, dwpe(T,C) += sum over b of dout.
void embedding_backward(int device, float* dwte, float* dwpe, const float* dout,
                        const int32_t* tokens, int B, int T, int C, int V);

// out(N,C), mean(N), rstd(N) from inp(N,C), weight(C), bias(C).
void layernorm_forward(int device, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int C);
void layernorm_backward_input(int device, float* dinp, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd, int64_t N,
                              int C);
void layernorm_backward_weight(int device, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* mean, const float* rstd, int64_t N,
                               int C);

// out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC); bias may be null.
void matmul_forward(int device, float* out, const float* inp, const float* weight,
                    const float* bias, int64_t N, int C, int OC);
// dinp(N,C) += dout(N,OC) @ weight(OC,C)
void matmul_backward_input(int device, float* dinp, const float* dout, const float* weight,
                           int64_t N, int C, int OC);
// dweight(OC,C) += dout^T @ inp, dbias(OC) += column sums of dout (dbias may be null).
void matmul_backward_weight(int device, float* dweight, float* dbias, const float* dout,
                            const float* inp, int64_t N, int C, int OC);

// qkv(B,T,3C) -> out(B,T,C); preatt(B,NH,T,T) softmax probabilities, att(B,NH,T,T) after
// dropout. Uses scratch for q, k, v and the output in (B,NH,T,HS) layout.
void attention_forward(int device, float* out, float* preatt, float* att, const float* qkv, int B,
                       int T, int C, int NH, const DropoutSpec& dropout);
// dqkv(B,T,3C) += gradient of out w.r.t. qkv. Uses scratch for q, k, v, dout, dq, dk, dv in
// (B,NH,T,HS) layout and one (B,NH,T,T) buffer for the attention-score gradient.
void attention_backward(int device, float* dqkv, const float* dout, const float* qkv,
                        const float* preatt, const float* att, int B, int T, int C, int NH,
                        const DropoutSpec& dropout);

void gelu_forward(int device, float* out, const float* inp, int64_t n);
void gelu_backward(int device, float* dinp, const float* dout, const float* inp, int64_t n);
void residual_forward(int device, float* out, const float* a, const float* b, int64_t n);
void residual_backward(int device, float* da, float* db, const float* dout, int64_t n);
// out(B,T,W) = inp * mask / (1-p), counters from the spec's global coordinates; out may
// alias inp. dropout_backward: dinp(B,T,W) += dout * mask / (1-p).
void dropout_forward(int device, float* out, const float* inp, int64_t B, int64_t T, int64_t W,
                     const DropoutSpec& dropout);
void dropout_backward(int device, float* dinp, const float* dout, int64_t B, int64_t T, int64_t W,
                      const DropoutSpec& dropout);

// losses(N) = logsumexp(logits row) - logits[target]; targets < 0 give loss 0.
// Targets >= V throw.
void crossentropy_forward(int device, float* losses, const float* logits, const int32_t* targets,
                          int64_t N, int V);
// dlogits(N,V) = (softmax - onehot) * dloss, overwritten; dlogits may alias logits.
void crossentropy_backward(int device, float* dlogits, const float* logits, const int32_t* targets,
                           int64_t N, int V, float dloss);

}  // namespace tide::cuda
