// Linear layer out = inp @ weight^T + bias on the GPU: the three products through cuBLAS
// (cublasGemmEx, f32 compute, in the handle's pedantic math mode, see context.cu), the bias as
// a broadcast before the product (as the CPU does) and its gradient as a deterministic column
// sum.
//
// Dtypes (cuda_ops.h): the operands in the op's storage type, except what 16-bit training keeps
// in f32 (the logits, their gradient, f32 parameter gradients). cuBLAS multiplies two operands
// of one type, writing that type or (from 16-bit operands) f32; an output cuBLAS cannot write
// goes through f32 scratch and is rounded once. Where the two factors differ:
// - bf16 beside f32 (the LM head's backward products: the f32 logit gradient against bf16
//   weights or activations) runs as three bf16 GEMMs accumulating in f32: the f32 factor is
//   split into hi + mid + lo bf16 terms whose sum is its value (split_bf16_kernel), so the
//   products are those of the f32 values, on the tensor cores at the bf16 rate instead of an
//   f32 SGEMM (the CPU's AMX path does the same, kernels/cpu/gemm_bf16.h). The terms are made
//   for a bounded block of the f32 factor's columns (the tokens) at a time;
// - otherwise (fp16 beside f32) the 16-bit factor is widened to f32 in scratch (exact): an f32
//   value does not split exactly into fp16 terms, whose exponent range is narrower.
//
// 16-bit output: a product that overwrites is written by cuBLAS in the storage type (one
// rounding). One that adds to the output (after the bias, and the accumulating backward
// products) goes to f32 scratch and is added by finish_kernel, so that the sum is rounded
// once, as the CPU reference rounds it: cuBLAS's own beta = 1 with a 16-bit C disagreed with
// it in about a quarter of the elements (H200, 2026-11-27), as rounding twice would.
//
// The forward with a bias in fp16 storage runs as one cuBLASLt call with the BIAS epilogue,
// which adds the bias to the product's f32 sum before the one rounding, as the CPU rounds it:
// no broadcast and no f32 scratch pass (lt_bias_gemm; where cuBLASLt offers no algorithm, the
// broadcast and gemm() above). Not in bf16: there the epilogue's results differed from the
// CPU's in 27% of the elements (1232 of 4550, N=70 C=33 OC=65, H200, 2026-12-04), as rounding
// twice would, where fp16's matched.
//
// cuBLAS is column-major. A row-major (R,K) matrix is, read column-major, its transpose
// (K,R) with leading dimension K; so each row-major product below is written as the
// column-major product of the transposes: (X @ Y)^T = Y^T @ X^T.
#include <algorithm>

#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

namespace {

constexpr int kBlock = 256;
// Rows summed by one thread in the first pass of the bias gradient (fixed, see layernorm.cu).
constexpr int kRowsPerChunk = 64;

// out(N,OC): every row starts as the bias, and the GEMM adds the product (beta = 1).
template <typename O, typename T>
__global__ void broadcast_rows_kernel(O* out, const T* bias, int64_t N, int OC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < N * OC) out[i] = from_f32<O>(to_f32(bias[i % OC]));
}

// Column sums of x(N,M), pass 1: thread (chunk r, column j) sums its kRowsPerChunk rows.
template <typename T>
__global__ void column_partials_kernel(float* partial, const T* x, int64_t N, int M) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t r = blockIdx.y;
  if (j >= M) return;
  const int64_t n0 = r * kRowsPerChunk;
  const int64_t n1 = n0 + kRowsPerChunk < N ? n0 + kRowsPerChunk : N;
  float acc = 0.0f;
  for (int64_t n = n0; n < n1; ++n) acc += to_f32(x[n * M + j]);
  partial[r * M + j] = acc;
}

// Pass 2: dst[j] += sum of the partials of column j, in chunk order.
template <typename G>
__global__ void column_finish_kernel(G* dst, const float* partial, int64_t n_chunks, int M) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= M) return;
  float acc = 0.0f;
  for (int64_t r = 0; r < n_chunks; ++r) acc += partial[r * M + j];
  dst[j] = from_f32<G>(to_f32(dst[j]) + acc);
}

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;  // with_storage_type admits nothing but the three float types
  }
}

// c(n) = p (+ c when accumulating), added in f32 and rounded once.
template <typename T>
__global__ void finish_kernel(T* c, const float* p, int64_t n, bool accumulate) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) c[i] = from_f32<T>(accumulate ? to_f32(c[i]) + p[i] : p[i]);
}

// A column-major operand of a product: its device data, dtype and leading dimension.
struct Operand {
  const void* data;
  DType dtype;
  int64_t ld;
};

size_t aligned(size_t bytes) {
  return CudaHandles::aligned(bytes);
}

// C(n) = p (+ C when accumulating) in C's 16-bit dtype, rounded once (finish_kernel).
void finish_via_f32(const OpContext& ctx, void* C, DType c_dtype, const float* p, int64_t n,
                    bool accumulate) {
  with_storage_type(c_dtype, [&](auto tag) {
    using T = decltype(tag);
    finish_kernel<T>
        <<<ceil_div(n, kBlock), kBlock, 0, stream_of(ctx)>>>(static_cast<T*>(C), p, n, accumulate);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

// The three bf16 terms of a block of an f32 factor, together: at most this much scratch.
constexpr int64_t kSplitTermsBytes = int64_t{256} << 20;

// hi + mid + lo == x: each term takes the next 8 of f32's 24 significant bits (x - hi and its
// remainder are exact in f32), and bf16 has f32's exponent range. Exact for |x| >= 2^-110;
// below that the last term loses bits under bf16's smallest subnormal, 2^-133.
__global__ void split_bf16_kernel(__nv_bfloat16* hi, __nv_bfloat16* mid, __nv_bfloat16* lo,
                                  const float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  const __nv_bfloat16 h = __float2bfloat16_rn(v);
  const float r = v - __bfloat162float(h);
  const __nv_bfloat16 m = __float2bfloat16_rn(r);
  hi[i] = h;
  mid[i] = m;
  lo[i] = __float2bfloat16_rn(r - __bfloat162float(m));
}

// gemm() for a bf16 A and an f32 B: three bf16 GEMMs per block of B's stored columns (n when
// B is not transposed, else k), accumulating in f32 (C itself when f32, else f32 scratch
// rounded into C once at the end).
void gemm_split_b(const OpContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  Operand a, Operand b, bool accumulate, void* C, DType c_dtype) {
  const cudaStream_t stream = stream_of(ctx);
  const int64_t cols = trans_b ? k : n;  // B stored (k,n), or (n,k) when transposed
  const int64_t rows = b.ld;
  const int64_t block = std::max<int64_t>(
      1, std::min<int64_t>(cols, kSplitTermsBytes / (3 * rows * sizeof(__nv_bfloat16))));
  const bool via_f32 = c_dtype != DType::F32;
  const size_t c_bytes = via_f32 ? aligned(m * n * sizeof(float)) : 0;
  const size_t term_bytes = aligned(block * rows * sizeof(__nv_bfloat16));
  char* scratch = static_cast<char*>(handles_of(ctx).scratch(c_bytes + 3 * term_bytes));
  float* out = via_f32 ? reinterpret_cast<float*>(scratch) : static_cast<float*>(C);
  __nv_bfloat16* terms[3];
  for (int t = 0; t < 3; ++t)
    terms[t] = reinterpret_cast<__nv_bfloat16*>(scratch + c_bytes + t * term_bytes);
  const cublasHandle_t cublas = handles_of(ctx).cublas;
  TIDE_CUBLAS_CHECK(cublasSetStream(cublas, stream));
  const float alpha = 1.0f, one = 1.0f, first_beta = accumulate && !via_f32 ? 1.0f : 0.0f;
  const auto* a_data = static_cast<const __nv_bfloat16*>(a.data);
  for (int64_t c0 = 0; c0 < cols; c0 += block) {
    const int64_t w = std::min(block, cols - c0);
    split_bf16_kernel<<<ceil_div(w * rows, kBlock), kBlock, 0, stream>>>(
        terms[0], terms[1], terms[2], static_cast<const float*>(b.data) + c0 * rows, w * rows);
    TIDE_CUDA_CHECK_LAUNCH();
    // A block of n: its columns of C. A block of k: its part of A, added to C.
    const int64_t bn = trans_b ? n : w, bk = trans_b ? w : k;
    const __nv_bfloat16* a_block = trans_b ? a_data + (trans_a ? c0 : c0 * a.ld) : a_data;
    float* c_block = trans_b ? out : out + c0 * m;
    for (int t = 0; t < 3; ++t) {
      // The first product into a block of C overwrites it (unless adding to an f32 C).
      const bool first = t == 0 && (!trans_b || c0 == 0);
      TIDE_CUBLAS_CHECK(cublasGemmEx(
          cublas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
          static_cast<int>(m), static_cast<int>(bn), static_cast<int>(bk), &alpha, a_block,
          CUDA_R_16BF, static_cast<int>(a.ld), terms[t], CUDA_R_16BF, static_cast<int>(rows),
          first ? &first_beta : &one, c_block, CUDA_R_32F, static_cast<int>(m), CUBLAS_COMPUTE_32F,
          CUBLAS_GEMM_DEFAULT));
    }
  }
  if (via_f32) finish_via_f32(ctx, C, c_dtype, out, m * n, accumulate);
}

// Column-major C(m,n) = op(A) op(B) + (accumulate ? C : 0), f32 compute, C in c_dtype with
// leading dimension m (every product here writes a whole, contiguous C). See the top of the
// file for mixed factors and the f32 scratch output.
void gemm(const OpContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          Operand a, Operand b, bool accumulate, void* C, DType c_dtype) {
  if (a.dtype == DType::BF16 && b.dtype == DType::F32)
    return gemm_split_b(ctx, trans_a, trans_b, m, n, k, a, b, accumulate, C, c_dtype);
  const cudaStream_t stream = stream_of(ctx);
  // Elements of A (k x m when transposed, else m x k, column-major) and of B.
  const int64_t a_elems = a.ld * (trans_a ? m : k), b_elems = b.ld * (trans_b ? k : n);
  const bool widen_a = a.dtype != b.dtype && a.dtype != DType::F32;
  const bool widen_b = a.dtype != b.dtype && b.dtype != DType::F32;
  const DType ab = a.dtype == b.dtype ? a.dtype : DType::F32;
  // cuBLAS writes C in the factors' type, or in f32 from 16-bit factors; a 16-bit sum goes
  // through f32 scratch (rounded once).
  const bool via_f32 = c_dtype != DType::F32 && (c_dtype != ab || accumulate);
  const size_t a_bytes = widen_a ? aligned(a_elems * sizeof(float)) : 0;
  const size_t b_bytes = widen_b ? aligned(b_elems * sizeof(float)) : 0;
  const size_t c_bytes = via_f32 ? aligned(m * n * sizeof(float)) : 0;
  char* scratch = a_bytes + b_bytes + c_bytes > 0
                      ? static_cast<char*>(handles_of(ctx).scratch(a_bytes + b_bytes + c_bytes))
                      : nullptr;
  if (widen_a) {
    convert_async(ctx, scratch, DType::F32, a.data, a.dtype, a_elems);
    a = {scratch, DType::F32, a.ld};
  }
  if (widen_b) {
    convert_async(ctx, scratch + a_bytes, DType::F32, b.data, b.dtype, b_elems);
    b = {scratch + a_bytes, DType::F32, b.ld};
  }
  void* out = via_f32 ? scratch + a_bytes + b_bytes : C;  // f32 (m,n) when via_f32
  const float alpha = 1.0f, beta = accumulate && !via_f32 ? 1.0f : 0.0f;
  const cublasHandle_t cublas = handles_of(ctx).cublas;
  TIDE_CUBLAS_CHECK(cublasSetStream(cublas, stream));  // host-side only: cheap
  TIDE_CUBLAS_CHECK(cublasGemmEx(
      cublas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha, a.data,
      cuda_data_type(ab), static_cast<int>(a.ld), b.data, cuda_data_type(ab),
      static_cast<int>(b.ld), &beta, out, via_f32 ? CUDA_R_32F : cuda_data_type(c_dtype),
      static_cast<int>(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (via_f32) finish_via_f32(ctx, C, c_dtype, static_cast<const float*>(out), m * n, accumulate);
}

// The largest power of two (up to 256) that divides the address: cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told, and would pick kernels that need it.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t bytes = 256;
  while (bytes > 1 && a % bytes != 0) bytes /= 2;
  return bytes;
}

// cuBLASLt's descriptors of one call, destroyed with it.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtCall() {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

template <typename V>
void set(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute, const V& value) {
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value)));
}
template <typename V>
void set(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attribute,
         const V& value) {
  TIDE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attribute, &value, sizeof(value)));
}

// out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC), all in `dtype` (fp16), in one cuBLASLt call
// (see the top of the file); false, having done nothing, when cuBLASLt offers no algorithm.
// Column-major: out^T(OC,N) = weight^T'(OC,C) @ inp^T(C,N), the bias one value per row of out^T.
// Split-K reductions are limited to an f32 workspace (no in-place ones, which may use atomics:
// the results repeat bit for bit).
bool lt_bias_gemm(const OpContext& ctx, DType dtype, void* out, const void* inp, const void* weight,
                  const void* bias, int64_t N, int C, int OC) {
  if (reinterpret_cast<uintptr_t>(bias) % 16 != 0) return false;
  CudaHandles& h = handles_of(ctx);
  const cudaDataType_t type = cuda_data_type(dtype);
  LtCall call;
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&call.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(call.op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(call.op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  set(call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  set(call.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(type));
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.a, type, C, OC, C));   // weight^T stored
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.b, type, C, N, C));    // inp^T
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.d, type, OC, N, OC));  // out^T
  TIDE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&call.preference));
  set(call.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, h.workspace_bytes);
  set(call.preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
      static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  set(call.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(weight));
  set(call.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(inp));
  set(call.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(out));
  set(call.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(out));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(h.cublaslt, call.op, call.a, call.b, call.d, call.d,
                                     call.preference, 1, &result,
                                     &found) != CUBLAS_STATUS_SUCCESS ||
      found == 0)
    return false;
  const float alpha = 1.0f, beta = 0.0f;
  // A refusal here (an argument cuBLASLt checks only now) leaves the product to the path that
  // does not need it; nothing has run.
  return cublasLtMatmul(h.cublaslt, call.op, &alpha, weight, call.a, inp, call.b, &beta, out,
                        call.d, out, call.d, &result.algo, h.workspace, h.workspace_bytes,
                        stream_of(ctx)) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace

void matmul_forward(const OpContext& ctx, DType dtype, DType out_dtype, void* out, const void* inp,
                    const void* weight, const void* bias, int64_t N, int C, int OC) {
  if (N == 0) return;
  const bool with_bias = bias != nullptr;
  if (with_bias && dtype == DType::F16 && out_dtype == dtype &&
      lt_bias_gemm(ctx, dtype, out, inp, weight, bias, N, C, OC))
    return;
  if (with_bias) {
    with_storage_types(out_dtype, dtype, [&](auto out_tag, auto tag) {
      using O = decltype(out_tag);
      using T = decltype(tag);
      broadcast_rows_kernel<O, T><<<ceil_div(N * OC, kBlock), kBlock, 0, stream_of(ctx)>>>(
          static_cast<O*>(out), static_cast<const T*>(bias), N, OC);
    });
    TIDE_CUDA_CHECK_LAUNCH();
  }
  // Row-major out(N,OC) = inp(N,C) @ weight(OC,C)^T; column-major:
  // out^T(OC,N) = weight(OC,C) @ inp^T(C,N), where weight is stored as weight^T (C,OC).
  gemm(ctx, true, false, OC, N, C, {weight, dtype, C}, {inp, dtype, C}, with_bias, out, out_dtype);
}

void matmul_backward_input(const OpContext& ctx, DType dtype, DType dout_dtype, void* dinp,
                           const void* dout, const void* weight, int64_t N, int C, int OC) {
  if (N == 0) return;
  // Row-major dinp(N,C) += dout(N,OC) @ weight(OC,C); column-major:
  // dinp^T(C,N) += weight^T(C,OC) @ dout^T(OC,N), both stored as they are needed.
  gemm(ctx, false, false, C, N, OC, {weight, dtype, C}, {dout, dout_dtype, OC}, true, dinp, dtype);
}

void matmul_backward_weight(const OpContext& ctx, DType dtype, DType dout_dtype, DType grad_dtype,
                            void* dweight, void* dbias, const void* dout, const void* inp,
                            int64_t N, int C, int OC) {
  if (N == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  // Row-major dweight(OC,C) += dout^T(OC,N) @ inp(N,C); column-major:
  // dweight^T(C,OC) += inp^T(C,N) @ dout(N,OC), where dout is stored as dout^T (OC,N).
  gemm(ctx, false, true, C, OC, N, {inp, dtype, C}, {dout, dout_dtype, OC}, true, dweight,
       grad_dtype);
  if (dbias == nullptr) return;
  const int64_t n_chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  TIDE_ASSERT(n_chunks <= 65535);  // the grid's y dimension: N up to 4M rows
  float* partial =
      static_cast<float*>(handles_of(ctx).scratch(n_chunks * OC * sizeof(float)));  // (n_chunks,OC)
  const dim3 grid(ceil_div(OC, kBlock), static_cast<unsigned int>(n_chunks));
  with_storage_types(dout_dtype, grad_dtype, [&](auto dout_tag, auto grad_tag) {
    using D = decltype(dout_tag);
    using G = decltype(grad_tag);
    column_partials_kernel<D>
        <<<grid, kBlock, 0, stream>>>(partial, static_cast<const D*>(dout), N, OC);
    TIDE_CUDA_CHECK_LAUNCH();
    column_finish_kernel<G><<<ceil_div(OC, kBlock), kBlock, 0, stream>>>(static_cast<G*>(dbias),
                                                                         partial, n_chunks, OC);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda
