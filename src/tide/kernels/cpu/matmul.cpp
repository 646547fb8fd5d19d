// Linear layer out = inp @ weight^T + bias through tide's own AVX-512 or AVX2 GEMM (gemm_f32.h,
// the default on AMD) or OpenBLAS sgemm (tiled, see gemm.h). The weight is (OC,C) row-major as in
// PyTorch, so every product is a plain row-major product with one transpose. Backward ops
// accumulate into the gradient (sgemm's beta = 1).
// With bf16 storage throughout, the *_native variants run the same products on the stored
// bf16 values through gemm_bf16.h where the CPU has AMX.
#include <algorithm>

#include "tide/kernels/cpu/cpu_ops.h"
#include "tide/kernels/cpu/f32_buffer.h"
#include "tide/kernels/cpu/gemm.h"
#include "tide/kernels/cpu/gemm_bf16.h"
#include "tide/kernels/cpu/gemm_f32.h"
#include "tide/kernels/cpu/simd.h"

namespace tide::cpu {

namespace {
// Output channels per work item of the bias gradient (one cache line of each row: OC = 192
// makes 12 items, enough to keep the threads even).
constexpr int kChannelBlock = 16;

// C(M,N) = op(A) @ op(B) with `e` (bias: N floats), all f32, through the f32 path this CPU
// takes: tide's AVX-512 or AVX2 GEMM, or OpenBLAS's tiles, where the bias is every row's start and
// sgemm adds the product (beta = 1).
void f32_product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float* C, int64_t ldc, GemmEpilogue e,
                 const float* bias = nullptr) {
  if (f32_gemm_path() != F32GemmPath::kOpenBlas)
    return gemm_f32(M, N, K, {A, lda, ta, DType::F32}, {B, ldb, tb, DType::F32}, C, ldc, e, bias);
  if (e == GemmEpilogue::kAddBias) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; ++i) std::copy(bias, bias + N, C + i * ldc);
  }
  gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, e == GemmEpilogue::kOverwrite ? 0.0f : 1.0f, C, ldc);
}
}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int C, int OC) {
  // out(N,OC) = inp(N,C) @ weight(OC,C)^T (+ bias)
  f32_product(false, true, N, OC, C, inp, C, weight, C, out, OC,
              bias != nullptr ? GemmEpilogue::kAddBias : GemmEpilogue::kOverwrite, bias);
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N, int C,
                           int OC) {
  // dinp(N,C) += dout(N,OC) @ weight(OC,C)
  f32_product(false, false, N, C, OC, dout, OC, weight, C, dinp, C, GemmEpilogue::kAccumulate);
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t N, int C, int OC) {
  // dweight(OC,C) += dout(N,OC)^T @ inp(N,C)
  f32_product(true, false, OC, C, N, dout, OC, inp, C, dweight, C, GemmEpilogue::kAccumulate);
  if (dbias != nullptr) matmul_bias_gradient(dbias, dout, N, OC);
}

void matmul_bias_gradient(float* dbias, const float* dout, int64_t N, int OC) {
  // dbias(OC) += column sums of dout, each block of columns summed over rows in order (each
  // column's sum is sequential in n; the 8 columns of a v8f are independent sums).
  const int n_blocks = (OC + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int o0 = blk * kChannelBlock, o1 = std::min(OC, o0 + kChannelBlock);
    if (o1 - o0 == kChannelBlock) {
      v8f acc[kChannelBlock / 8] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float* dy = dout + n * OC + o0;
        for (int j = 0; j < kChannelBlock / 8; ++j) acc[j] += load8(dy + 8 * j);
      }
      for (int j = 0; j < kChannelBlock / 8; ++j)
        store8(dbias + o0 + 8 * j, load8(dbias + o0 + 8 * j) + acc[j]);
      continue;
    }
    float acc[kChannelBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* dy = dout + n * OC;
      for (int o = o0; o < o1; ++o) acc[o - o0] += dy[o];
    }
    for (int o = o0; o < o1; ++o) dbias[o] += acc[o - o0];
  }
}

// ---- bf16 storage through the native GEMM ------------------------------------------------

namespace {
// Whether the native GEMM takes factors x, y and output z (gemm_bf16_takes): the path chosen
// is not the reference, and none of them is f16. On AVX512-BF16 both factors are bf16: an f32
// factor's three terms would triple the work at a rate no higher than sgemm's.
bool native(const Tensor& x, const Tensor& y, const Tensor& z) {
  const Bf16GemmPath path = bf16_gemm_path();
  if (path == Bf16GemmPath::kAvx512Bf16 && (x.dtype != DType::BF16 || y.dtype != DType::BF16))
    return false;
  return path != Bf16GemmPath::kReference && gemm_bf16_takes(x.dtype, y.dtype, z.dtype);
}
}  // namespace

bool matmul_forward_native(const Tensor& out, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias, int64_t N, int C, int OC) {
  if (!native(inp, weight, out)) return false;
  const F32Buffer bias_(bias);  // f32 or widened; the sum is added to it as sgemm's beta = 1
  gemm_bf16(bf16_gemm_path(), N, OC, C, {inp.data, C, false, inp.dtype},
            {weight.data, C, true, weight.dtype}, out.data, out.dtype, OC,
            bias.defined() ? GemmEpilogue::kAddBias : GemmEpilogue::kOverwrite, bias_.get());
  return true;
}

bool matmul_backward_input_native(const Tensor& dinp, const Tensor& dout, const Tensor& weight,
                                  int64_t N, int C, int OC) {
  if (!native(dout, weight, dinp)) return false;
  gemm_bf16(bf16_gemm_path(), N, C, OC, {dout.data, OC, false, dout.dtype},
            {weight.data, C, false, weight.dtype}, dinp.data, dinp.dtype, C,
            GemmEpilogue::kAccumulate);
  return true;
}

bool matmul_backward_weight_native(const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                                   const Tensor& inp, int64_t N, int C, int OC) {
  if (!native(dout, inp, dweight)) return false;
  gemm_bf16(bf16_gemm_path(), OC, C, N, {dout.data, OC, true, dout.dtype},
            {inp.data, C, false, inp.dtype}, dweight.data, dweight.dtype, C,
            GemmEpilogue::kAccumulate);
  if (dbias.defined()) {  // the reference's column sums, on dout widened
    const F32Buffer dbias_(dbias), dout_(dout);
    matmul_bias_gradient(dbias_.get(), dout_.get(), N, OC);
    dbias_.store();
  }
  return true;
}

}  // namespace tide::cpu
