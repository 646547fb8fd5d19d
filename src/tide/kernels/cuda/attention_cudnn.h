#pragma once
// cuDNN's fused attention for the attention op on a GPU (issue #27): flash attention through
// the cudnn-frontend graph API, forward and backward, which never holds the (B,NH,T,T) scores
// that tide's own kernels (attention.cu) build in scratch. attention.cu calls it first and runs
// its own kernels whenever it declines. Host code only; C++17-clean.
//
// It declines (returns false or nullptr, having done nothing) unless
//  - ctx.fused_attention is set (make_op_context sets it; the op table's strict GPU-against-CPU
//    checks clear it, cuDNN rounding the probabilities to the storage type inside the kernel);
//  - the storage is bf16 or fp16 (cuDNN's fused attention has no f32 path);
//  - there is no dropout: cuDNN draws its own masks, not tide's, whose counters come from each
//    element's global coordinates (ops.h's DropoutSpec) so that every layout draws the
//    single-rank mask;
//  - the head size is a multiple of 8 up to 128;
//  - libcudnn.so.9 loads (it is opened at run time: the module needs no cuDNN to load) and
//    cuDNN supports the shape. Both graphs of a shape, forward and backward, are built on the
//    shape's first call, so that its forward and backward always take the same path.
// Built only where scripts/fetch_cudnn_frontend.sh put the headers (TIDE_HAVE_CUDNN_FRONTEND);
// elsewhere every call declines.

#include <cstdint>

#include "tide/core/dtype.h"
#include "tide/kernels/ops.h"

namespace tide::cuda {

// out(B,T,C) and lse(B,NH,T) from qkv(B,T,W) as attention_forward (cuda_ops.h) computes them,
// through cuDNN; false when it declined.
bool cudnn_attention_forward(const OpContext& ctx, DType dtype, void* out, float* lse,
                             const void* qkv, int B, int T, int C, int NH, int NKV,
                             float dropout_p);

// The gradient of qkv (B,T,W), in the storage type, written into the context's scratch (valid
// until its next scratch() call), for the caller to add into dqkv; nullptr when it declined.
// cuDNN's backward needs the forward's output and statistics: it recomputes both (one fused
// forward more per backward), since the op's backward is not given the output.
const void* cudnn_attention_backward(const OpContext& ctx, DType dtype, const void* dout,
                                     const void* qkv, int B, int T, int C, int NH, int NKV,
                                     float dropout_p);

}  // namespace tide::cuda
