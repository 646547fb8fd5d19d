// RoPE on the GPU (same rotation as cpu/rope.cpp): in each qkv row (B,T,(NH + 2*NKV)*HS) the
// q and k heads' pairs (i, i + HS/2) turn by t * inv_freq[i] (f32 product, then sincosf, as
// transformers computes the angles), the v heads are copied. Why one thread per pair: the op is
// one pass over memory, and a thread that reads both elements of its pair before writing them
// makes the in-place call (out aliasing inp) safe.
#include <cmath>

#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

namespace {

constexpr int kBlock = 256;

// Thread j of row r: j < pairs rotates pair j (head j / H, index j % H); the next v_width
// threads copy (forward) or accumulate (backward) one v element each.
template <typename T, bool kBackward>
__global__ void rope_kernel(T* y, const T* x, const float* inv_freq, int64_t rows, int Tn, int H,
                            int HS, int pairs, int v_width) {
  const int per_row = pairs + v_width;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * per_row) return;
  const int64_t r = idx / per_row;
  const int j = static_cast<int>(idx % per_row);
  const int64_t W = static_cast<int64_t>(pairs) * 2 + v_width;
  const T* xr = x + r * W;
  T* yr = y + r * W;
  if (j >= pairs) {  // v
    const int64_t k = static_cast<int64_t>(pairs) * 2 + (j - pairs);
    yr[k] = kBackward ? from_f32<T>(to_f32(yr[k]) + to_f32(xr[k])) : xr[k];
    return;
  }
  const int i = j % H;
  const int64_t a = static_cast<int64_t>(j / H) * HS + i, b = a + H;
  const float angle = static_cast<float>(r % Tn) * inv_freq[i];
  float s, c;
  sincosf(angle, &s, &c);
  const float x1 = to_f32(xr[a]), x2 = to_f32(xr[b]);
  if (kBackward) {  // turned by -angle, accumulated
    yr[a] = from_f32<T>(to_f32(yr[a]) + (x1 * c + x2 * s));
    yr[b] = from_f32<T>(to_f32(yr[b]) + (x2 * c - x1 * s));
  } else {
    yr[a] = from_f32<T>(x1 * c - x2 * s);
    yr[b] = from_f32<T>(x2 * c + x1 * s);
  }
}

template <bool kBackward>
void launch_rope(const OpContext& ctx, DType dtype, void* y, const void* x, const float* inv_freq,
                 int B, int T, int NH, int NKV, int HS) {
  const int64_t rows = static_cast<int64_t>(B) * T;
  const int H = HS / 2, pairs = (NH + NKV) * H, v_width = NKV * HS;
  const int64_t n = rows * (pairs + v_width);
  if (n == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using Tp = decltype(tag);
    rope_kernel<Tp, kBackward><<<ceil_div(n, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<Tp*>(y), static_cast<const Tp*>(x), inv_freq, rows, T, H, HS, pairs, v_width);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(const OpContext& ctx, DType dtype, void* out, const void* inp,
                  const float* inv_freq, int B, int T, int NH, int NKV, int HS) {
  launch_rope<false>(ctx, dtype, out, inp, inv_freq, B, T, NH, NKV, HS);
}

void rope_backward(const OpContext& ctx, DType dtype, void* dinp, const void* dout,
                   const float* inv_freq, int B, int T, int NH, int NKV, int HS) {
  launch_rope<true>(ctx, dtype, dinp, dout, inv_freq, B, T, NH, NKV, HS);
}

}  // namespace tide::cuda
