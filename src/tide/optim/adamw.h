#pragma once
// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization"), with PyTorch's
// torch.optim.AdamW semantics. For step t = 1, 2, ... and every element:
//
//   g = grad * grad_scale                 (fp16 loss-scale unscale and clip factor, one multiply)
//   p = p * (1 - lr*wd)                   (decoupled weight decay, before the Adam update)
//
// With AdamWHyper::decoupled = false it is classic Adam with L2 regularisation instead
// (torch.optim.Adam's weight_decay; DeepSpeed's Adam with adam_w_mode false): the decay is
// folded into the gradient, so it goes through the moments, and p is not decayed:
//
//   g = grad * grad_scale + wd * p        (p before this step's update; two roundings, no FMA)
//
// and the lines below are the same.
//   m = b1*m + (1-b1)*g
//   v = b2*v + (1-b2)*g*g
//   p = p - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
//
// which is  p - lr * mhat / (sqrt(vhat) + eps)  with mhat = m/(1-b1^t), vhat = v/(1-b2^t),
// arranged the way PyTorch arranges it: the bias corrections are folded into two scalars
// computed once per step in double (AdamWScalars), so the per-element work is 2 divides and a
// square root. Every implementation (the reference, the SIMD CPU paths, the CUDA kernel) uses
// exactly these scalars and this order of operations, without fused multiply-adds, so their
// results are bitwise identical.
//
// This header is C++17-clean: it is included from .cu files.

#include <cmath>
#include <cstdint>

#include "tide/core/dtype.h"

namespace tide {

// Hyper-parameters in double, like PyTorch's Python floats: 1 - beta and the bias corrections
// are computed from the exact decimal-ish values (1 - 0.999 is 0.001, while 1 - 0.999f is
// 0.00099998713), and each scalar is rounded to float once, in adamw_scalars.
struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // true: AdamW's decoupled decay; false: classic Adam, the decay added to the gradient (L2).
  bool decoupled = true;
};

struct AdamWStep {
  int64_t t = 1;            // 1-based step number (bias correction uses it)
  float grad_scale = 1.0f;  // multiplies every gradient: 1/loss_scale * clip_coefficient
};

// The per-step scalars every implementation uses. Powers and quotients in double, then
// rounded to float once, as PyTorch does with its Python-float hyper-parameters.
struct AdamWScalars {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float eps;
  float decay;      // 1 - lr*wd (decoupled), 1 (classic Adam)
  float l2;         // 0 (decoupled), wd (classic Adam: g += wd * p)
  float step_size;  // lr / (1 - b1^t)
  float bc2_sqrt;   // sqrt(1 - b2^t)
  float grad_scale;
};

// Throws a tide::Error naming the bad hyper-parameter (lr < 0, beta outside [0,1), eps <= 0,
// step t < 1, non-finite grad_scale ...) and the accepted range.
void check_adamw_args(const AdamWHyper& h, const AdamWStep& s);

inline AdamWScalars adamw_scalars(const AdamWHyper& h, const AdamWStep& s) {
  const double b1 = h.beta1, b2 = h.beta2, t = static_cast<double>(s.t);
  AdamWScalars k;
  k.beta1 = static_cast<float>(b1);
  k.one_minus_beta1 = static_cast<float>(1.0 - b1);
  k.beta2 = static_cast<float>(b2);
  k.one_minus_beta2 = static_cast<float>(1.0 - b2);
  k.eps = static_cast<float>(h.eps);
  k.decay = h.decoupled ? static_cast<float>(1.0 - h.lr * h.weight_decay) : 1.0f;
  k.l2 = h.decoupled ? 0.0f : static_cast<float>(h.weight_decay);
  k.step_size = static_cast<float>(h.lr / (1.0 - std::pow(b1, t)));
  k.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, t)));
  k.grad_scale = s.grad_scale;
  return k;
}

// The oracle: a plain scalar loop over f32 gradients, written straight from the formulas
// above. Updates master, m and v in place. No checks for non-finite gradients.
void adamw_reference(float* master, const float* grad, float* m, float* v, int64_t n,
                     const AdamWHyper& h, const AdamWStep& s);

// One contiguous piece of optimizer state (a chunk, or a part of one): n elements of each
// buffer, at the same offsets.
struct AdamWChunk {
  float* master = nullptr;     // fp32 master parameters, updated in place
  const void* grad = nullptr;  // gradients, of grad_dtype (F32, BF16 or F16)
  DType grad_dtype = DType::F32;
  float* m = nullptr;               // first moment, updated in place
  float* v = nullptr;               // second moment, updated in place
  void* param_out = nullptr;        // optional compute-precision copy of the updated master
  DType param_dtype = DType::BF16;  // F32, BF16 or F16 (rounded to nearest even)
  int64_t n = 0;
};

// Throws a tide::Error if a buffer is missing or a dtype is not supported.
void check_adamw_chunk(const AdamWChunk& c);

}  // namespace tide
