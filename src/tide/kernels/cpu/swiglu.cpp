// SwiGLU, the gated MLP activation of Llama/Qwen/Mistral: one (N,2I) input row holds the gate
// projection (columns 0..I-1) and the up projection (columns I..2I-1) side by side, so the two
// projections run as one GEMM and this op joins them:
//   out = silu(gate) * up,  silu(g) = g / (1 + exp(-g))   (torch's silu formula)
// Why a fused op: the (N,I) silu(gate) temporary is never written, and the backward recomputes
// the sigmoid from the saved input instead of keeping it.
#include <algorithm>

#include "tide/kernels/cpu/cpu_ops.h"
#include "tide/kernels/cpu/simd.h"

namespace tide::cpu {

namespace {
// sigmoid(g) = 1 / (1 + exp(-g)); exp overflowing to inf (g < -88) gives exactly 0.
inline v8f sigmoid8(v8f g) {
  return splat(1.0f) / (splat(1.0f) + exp8(-g));
}
inline v8f swiglu8(v8f g, v8f u) {
  return g / (splat(1.0f) + exp8(-g)) * u;
}
// d gate += dout * up * silu'(g), silu'(g) = s (1 + g (1 - s)); d up += dout * silu(g).
inline void swiglu_backward8(float* dg, float* du, v8f dy, v8f g, v8f u, int n) {
  const v8f s = sigmoid8(g);
  const v8f silu = g / (splat(1.0f) + exp8(-g));
  const v8f dsilu = s * (splat(1.0f) + g * (splat(1.0f) - s));
  if (n == 8) {
    store8(dg, load8(dg) + dy * u * dsilu);
    store8(du, load8(du) + dy * silu);
  } else {
    store_partial(dg, load_partial(dg, n) + dy * u * dsilu, n);
    store_partial(du, load_partial(du, n) + dy * silu, n);
  }
}
}  // namespace

// Rows are independent and each is written by one thread; every element gets the same
// arithmetic (exp8's lanes are independent, the tail is padded), whatever the thread count.
void swiglu_forward(float* out, const float* inp, int64_t N, int I) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gate = inp + n * 2 * I;  // (I)
    const float* up = gate + I;           // (I)
    float* y = out + n * I;               // (I)
    int i = 0;
    for (; i + 8 <= I; i += 8) store8(y + i, swiglu8(load8(gate + i), load8(up + i)));
    if (i < I)
      store_partial(y + i, swiglu8(load_partial(gate + i, I - i), load_partial(up + i, I - i)),
                    I - i);
  }
}

void swiglu_backward(float* dinp, const float* dout, const float* inp, int64_t N, int I) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gate = inp + n * 2 * I;
    const float* up = gate + I;
    const float* dy = dout + n * I;
    float* dgate = dinp + n * 2 * I;
    float* dup = dgate + I;
    int i = 0;
    for (; i + 8 <= I; i += 8)
      swiglu_backward8(dgate + i, dup + i, load8(dy + i), load8(gate + i), load8(up + i), 8);
    if (i < I) {
      const int r = I - i;
      swiglu_backward8(dgate + i, dup + i, load_partial(dy + i, r), load_partial(gate + i, r),
                       load_partial(up + i, r), r);
    }
  }
}

}  // namespace tide::cpu
