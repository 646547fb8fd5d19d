// The AdamW oracle and the argument checks shared by every implementation.

#include "tide/optim/fp_contract_off.h"  // first: see there

#include <cmath>

#include "tide/core/error.h"
#include "tide/optim/adamw.h"

namespace tide {

void check_adamw_args(const AdamWHyper& h, const AdamWStep& s) {
  TIDE_CHECK(std::isfinite(h.lr) && h.lr >= 0.0,
             "AdamW learning rate {} is invalid; use a finite lr >= 0 (e.g. 6e-4)", h.lr);
  TIDE_CHECK(h.beta1 >= 0.0 && h.beta1 < 1.0, "AdamW beta1 = {} is outside [0, 1); use e.g. 0.9",
             h.beta1);
  TIDE_CHECK(h.beta2 >= 0.0 && h.beta2 < 1.0,
             "AdamW beta2 = {} is outside [0, 1); use e.g. 0.95 or 0.999", h.beta2);
  TIDE_CHECK(std::isfinite(h.eps) && h.eps > 0.0,
             "AdamW eps = {} must be finite and > 0; use e.g. 1e-8", h.eps);
  TIDE_CHECK(std::isfinite(h.weight_decay) && h.weight_decay >= 0.0,
             "AdamW weight_decay = {} must be finite and >= 0; use e.g. 0.1 (0 disables it)",
             h.weight_decay);
  TIDE_CHECK(s.t >= 1,
             "AdamW step number t = {} must start at 1 (bias correction divides by "
             "1 - beta^t); pass the 1-based count of applied steps",
             s.t);
  TIDE_CHECK(std::isfinite(s.grad_scale),
             "AdamW grad_scale = {} is not finite; it is 1/loss_scale times the clip "
             "coefficient — skip the step instead when the gradient norm is not finite",
             s.grad_scale);
}

void check_adamw_chunk(const AdamWChunk& c) {
  TIDE_CHECK(c.n >= 0, "AdamW chunk has a negative element count {}", c.n);
  if (c.n == 0) return;
  TIDE_CHECK(c.master && c.grad && c.m && c.v,
             "AdamW chunk is missing a buffer (master {}, grad {}, m {}, v {}); every one of "
             "master, grad, m, v must point to n = {} elements",
             c.master ? "set" : "null", c.grad ? "set" : "null", c.m ? "set" : "null",
             c.v ? "set" : "null", c.n);
  const auto ok = [](DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; };
  TIDE_CHECK(ok(c.grad_dtype),
             "AdamW gradients of dtype {} are not supported; use f32, bf16 or f16",
             dtype_name(c.grad_dtype));
  TIDE_CHECK(!c.param_out || ok(c.param_dtype),
             "AdamW parameter copy of dtype {} is not supported; use f32, bf16 or f16",
             dtype_name(c.param_dtype));
}

void adamw_reference(float* master, const float* grad, float* m, float* v, int64_t n,
                     const AdamWHyper& h, const AdamWStep& s) {
  check_adamw_args(h, s);
  const AdamWScalars k = adamw_scalars(h, s);
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] * k.grad_scale;
    if (k.l2 != 0.0f) g = g + k.l2 * master[i];                // classic Adam: g += wd*p (L2)
    float p = master[i] * k.decay;                             // p = p - lr*wd*p
    m[i] = k.beta1 * m[i] + k.one_minus_beta1 * g;             // m = b1*m + (1-b1)*g
    v[i] = k.beta2 * v[i] + (k.one_minus_beta2 * g) * g;       // v = b2*v + (1-b2)*g*g
    const float denom = std::sqrt(v[i]) / k.bc2_sqrt + k.eps;  // sqrt(vhat) + eps, times sqrt(bc2)
    p = p - (k.step_size * m[i]) / denom;                      // p -= lr * mhat / (sqrt(vhat)+eps)
    master[i] = p;
  }
}

}  // namespace tide
