// bench_gpu_ops: time of the op API's CUDA kernels (tide/kernels/ops.h on cuda:0) on the
// shapes of one GPT-2 layer and its head, in f32 and in bf16 storage. Why: the first GPU
// figures of tide, and the side-by-side with PyTorch on the same card (bench/gpu/ops_torch.py
// runs the same ops and shapes and prints the same lines).
//
// For each op and dtype one JSON line:
//   op       the op (and which linear layer for matmuls: qkv C->3C, fc C->4C, proj 4C->C,
//            head C->V; "_bwd_in"/"_bwd_w" for the two backward products)
//   dtype    storage of the float tensors (f32 or bf16; the kernels compute in f32)
//   ms       median of --reps timed runs (CUDA events around each run, after 3 warm-up runs)
//   tflops   for matmuls and attention: useful flops / time (matmul 2*N*C*OC per product;
//            attention forward 4*B*NH*T*T*HS/2, the causal half of QK^T and AV; backward twice
//            the forward's)
//   gbps     for the memory-bound ops: bytes read and written once / time
//
// First line after the device: the GPU's bf16 GEMM peak (op peak_bf16_gemm, see below).
//
// Usage: bench_gpu_ops [--B 8] [--T 1024] [--C 768] [--NH 12] [--V 50304] [--reps 20]

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "../bench_cli.h"
#include "tide/core/device.h"
#include "tide/core/dtype.h"
#include "tide/core/error.h"
#include "tide/core/rng.h"
#include "tide/kernels/cuda/cuda_check.h"
#include "tide/kernels/ops.h"

using namespace tide;

namespace {

// One device buffer of n elements of `dtype`, random normal * scale (or token ids < hi). The
// values repeat with a period of 2^20 elements: drawing the head's (B*T,V) logits one by one
// took most of a 200 s run on the GPU machine, and a GEMM's time does not depend on them.
struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer(int64_t n, DType dtype, float scale, uint64_t seed, int32_t ids_below = 0) {
    const size_t es = dtype_size(dtype), bytes = static_cast<size_t>(n) * es;
    TIDE_CUDA_CHECK(cudaMalloc(&p, bytes));
    const int64_t period = std::min<int64_t>(n, int64_t{1} << 20);
    std::vector<char> slab(static_cast<size_t>(period) * es);
    const PhiloxStream rng{seed, 0};
    if (dtype == DType::I32) {
      auto* ids = reinterpret_cast<int32_t*>(slab.data());
      for (int64_t i = 0; i < period; ++i)
        ids[i] = static_cast<int32_t>(rng.uint(static_cast<uint64_t>(i)) % ids_below);
    } else {
      std::vector<float> f(period);
      for (int64_t i = 0; i < period; ++i) f[i] = scale * rng.normal(static_cast<uint64_t>(i));
      convert_elements(f.data(), DType::F32, slab.data(), dtype, period);
    }
    for (int64_t at = 0; at < n; at += period) {
      const int64_t count = std::min(period, n - at);
      TIDE_CUDA_CHECK(cudaMemcpy(static_cast<char*>(p) + at * es, slab.data(), count * es,
                                 cudaMemcpyHostToDevice));
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p); }
};

int g_reps = 20;

// Median time of fn on ctx's stream, in ms.
double time_ms(const OpContext& ctx, const std::function<void()>& fn) {
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t start, stop;
  TIDE_CUDA_CHECK(cudaEventCreate(&start));
  TIDE_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int r = 0; r < g_reps; ++r) {
    TIDE_CUDA_CHECK(cudaEventRecord(start, stream));
    fn();
    TIDE_CUDA_CHECK(cudaEventRecord(stop, stream));
    TIDE_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  TIDE_CUDA_CHECK(cudaEventDestroy(start));
  TIDE_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void print(const char* op, DType dtype, const std::string& shape, double ms, double flops,
           double bytes) {
  std::printf("{\"bench\":\"gpu_ops\",\"op\":\"%s\",\"dtype\":\"%s\",\"shape\":\"%s\",\"ms\":%.4f",
              op, std::string(dtype_name(dtype)).c_str(), shape.c_str(), ms);
  if (flops > 0) std::printf(",\"tflops\":%.1f", flops / (ms * 1e-3) / 1e12);
  if (bytes > 0) std::printf(",\"gbps\":%.0f", bytes / (ms * 1e-3) / 1e9);
  std::printf("}\n");
  std::fflush(stdout);
}

void run(DType dt, int64_t B, int64_t T, int64_t C, int NH, int64_t V) {
  const OpContext ctx = make_op_context(Device::cuda(0));
  const Device dev = ctx.device;
  const int64_t N = B * T, es = static_cast<int64_t>(dtype_size(dt));
  auto t = [&](const DeviceBuffer& b, Shape s, DType d) { return Tensor(b.p, s, d, dev); };
  const std::string nt = fmt::format("({},{})", N, C);

  // Linear layers: forward and both backward products of each.
  struct Linear {
    const char* name;
    int64_t in, out;
  };
  for (const Linear& l : {Linear{"qkv", C, 3 * C}, Linear{"fc", C, 4 * C}, Linear{"proj", 4 * C, C},
                          Linear{"head", C, V}}) {
    DeviceBuffer x(N * l.in, dt, 1.0f, 1), w(l.out * l.in, dt, 0.02f, 2), b(l.out, dt, 0.02f, 3),
        y(N * l.out, dt, 1.0f, 4), dx(N * l.in, dt, 0.0f, 5), dw(l.out * l.in, dt, 0.0f, 6),
        db(l.out, dt, 0.0f, 7);
    const Tensor tx = t(x, {N, l.in}, dt), tw = t(w, {l.out, l.in}, dt), tb = t(b, {l.out}, dt),
                 ty = t(y, {N, l.out}, dt);
    const double flops = 2.0 * N * l.in * l.out;
    const std::string shape = fmt::format("({},{})x({},{})^T", N, l.in, l.out, l.in);
    const bool bias = std::string(l.name) != "head";
    print(fmt::format("matmul_{}", l.name).c_str(), dt, shape,
          time_ms(ctx, [&] { matmul_forward(ctx, ty, tx, tw, bias ? tb : Tensor{}); }), flops, 0);
    print(fmt::format("matmul_{}_bwd_in", l.name).c_str(), dt, shape,
          time_ms(ctx,
                  [&] {
                    matmul_backward_input(ctx, t(dx, {N, l.in}, dt), ty, tw);
                  }),
          flops, 0);
    print(fmt::format("matmul_{}_bwd_w", l.name).c_str(), dt, shape,
          time_ms(ctx,
                  [&] {
                    matmul_backward_weight(ctx, t(dw, {l.out, l.in}, dt),
                                           bias ? t(db, {l.out}, dt) : Tensor{}, ty, tx);
                  }),
          flops, 0);
  }

  // Attention core: qkv (B,T,3C) -> out (B,T,C), saving lse (B,NH,T) f32.
  {
    DeviceBuffer qkv(N * 3 * C, dt, 1.0f, 8), out(N * C, dt, 0.0f, 9),
        lse(B * NH * T, DType::F32, 0.0f, 10), dout(N * C, dt, 1.0f, 12),
        dqkv(N * 3 * C, dt, 0.0f, 13);
    const Shape tl{B, NH, T};
    const double flops = 4.0 * B * NH * T * T * (C / NH) / 2;
    const std::string shape = fmt::format("B{} T{} C{} NH{}", B, T, C, NH);
    const DropoutSpec none;
    print("attention_forward", dt, shape,
          time_ms(ctx,
                  [&] {
                    attention_forward(ctx, t(out, {B, T, C}, dt), t(lse, tl, DType::F32),
                                      t(qkv, {B, T, 3 * C}, dt), NH, none);
                  }),
          flops, 0);
    print("attention_backward", dt, shape,
          time_ms(ctx,
                  [&] {
                    attention_backward(ctx, t(dqkv, {B, T, 3 * C}, dt), t(dout, {B, T, C}, dt),
                                       t(qkv, {B, T, 3 * C}, dt), t(lse, tl, DType::F32), NH, none);
                  }),
          2 * flops, 0);
  }

  // Memory-bound ops: layernorm, GELU, and the classifier (cross-entropy forward and backward).
  {
    DeviceBuffer x(N * C, dt, 1.0f, 14), y(N * C, dt, 0.0f, 15), w(C, dt, 1.0f, 16),
        b(C, dt, 0.0f, 17), mean(N, DType::F32, 0.0f, 18), rstd(N, DType::F32, 0.0f, 19);
    print("layernorm_forward", dt, nt,
          time_ms(ctx,
                  [&] {
                    layernorm_forward(ctx, t(y, {N, C}, dt), t(mean, {N}, DType::F32),
                                      t(rstd, {N}, DType::F32), t(x, {N, C}, dt), t(w, {C}, dt),
                                      t(b, {C}, dt));
                  }),
          0, 2.0 * N * C * es);
    DeviceBuffer h(N * 4 * C, dt, 1.0f, 20), g(N * 4 * C, dt, 0.0f, 21);
    print("gelu_forward", dt, fmt::format("({},{})", N, 4 * C),
          time_ms(ctx,
                  [&] {
                    gelu_forward(ctx, t(g, {N, 4 * C}, dt), t(h, {N, 4 * C}, dt));
                  }),
          0, 2.0 * N * 4 * C * es);
    DeviceBuffer logits(N * V, dt, 1.0f, 22),
        targets(N, DType::I32, 0.0f, 23, static_cast<int32_t>(V)), losses(N, DType::F32, 0.0f, 24);
    const Tensor tl = t(logits, {N, V}, dt), tt = t(targets, {N}, DType::I32);
    print("crossentropy_forward", dt, fmt::format("({},{})", N, V),
          time_ms(ctx, [&] { crossentropy_forward(ctx, t(losses, {N}, DType::F32), tl, tt); }), 0,
          1.0 * N * V * es);
    // In place, as the model calls it: read the logits, write the gradient over them.
    print("crossentropy_backward", dt, fmt::format("({},{})", N, V),
          time_ms(ctx, [&] { crossentropy_backward(ctx, tl, tl, tt, 1.0f / N); }), 0,
          2.0 * N * V * es);
  }
}

// The GPU's bf16 peak as a user's GEMM reaches it: cublasGemmEx, bf16 A, B and C, f32
// compute, cuBLAS's default math (tensor cores), on a square 8192^3 problem (large enough to
// saturate an H100/H200). MFU figures (bench_gpt_gpu, gpt_torch.py) divide by it.
void peak_bf16_gemm() {
  constexpr int n = 8192;
  const OpContext ctx = make_op_context(Device::cuda(0));
  DeviceBuffer a(int64_t{n} * n, DType::BF16, 1.0f, 11), b(int64_t{n} * n, DType::BF16, 1.0f, 12),
      c(int64_t{n} * n, DType::BF16, 0.0f, 13);
  cublasHandle_t h = nullptr;
  TIDE_CUBLAS_CHECK(cublasCreate(&h));
  TIDE_CUBLAS_CHECK(cublasSetStream(h, static_cast<cudaStream_t>(ctx.stream)));
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = time_ms(ctx, [&] {
    TIDE_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.p, CUDA_R_16BF,
                                   n, b.p, CUDA_R_16BF, n, &beta, c.p, CUDA_R_16BF, n,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  cublasDestroy(h);
  print("peak_bf16_gemm", DType::BF16, "8192x8192x8192", ms, 2.0 * n * n * n, 0);
}

}  // namespace

int main(int argc, char** argv) {
  int B = 8, T = 1024, C = 768, NH = 12, V = 50304;
  CLI::App app{
      "bench_gpu_ops: the op API's CUDA kernels on one GPT-2 layer's shapes, f32 and bf16"};
  bench::add_op_shape_options(app, B, T, C, NH, V, g_reps);
  try {
    bench::parse_args(app, argc, argv);
    TIDE_CHECK(C % NH == 0, "--C {} must be a multiple of --NH {}", C, NH);
    TIDE_CHECK(
        cuda_available(),
        "no CUDA GPU is visible; run it on a GPU machine (scripts/gpu_bundle.sh carries it)");
    cudaDeviceProp prop{};
    TIDE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("{\"bench\":\"gpu_ops\",\"device\":\"%s\"}\n", prop.name);
    peak_bf16_gemm();
    for (DType dt : {DType::F32, DType::BF16}) run(dt, B, T, C, NH, V);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gpu_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
