// The CUDA kernels of the op API against the CPU reference, in the style of ggml's
// test-backend-ops: the op case table (tests/support/op_cases.h) runs on both devices and
// every tensor the op touches is compared. The harness
//   1. runs the op on copies of the tensors with a CPU context (the reference);
//   2. uploads the same initial tensors to the GPU and runs the op with a CUDA context, twice;
//   3. compares, for every tensor (inputs too, which must come back unchanged):
//      GPU vs CPU within the case's tolerance, and GPU run 1 vs run 2 bit for bit (the CUDA
//      kernels are deterministic: no floating-point atomics, fixed reduction orders).
//
// Everything on the GPU is skipped when no GPU is visible; PhiloxCuh.* runs everywhere.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "op_cases.h"
#include "tide/core/device.h"
#include "tide/core/rng.h"
#include "tide/core/tensor.h"
#include "tide/kernels/cpu/dropout_mask.h"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_check.h"
#include "tide/kernels/cuda/philox.cuh"
#include "tide/kernels/mover.h"
#include "tide/kernels/ops.h"
#include "tide/memory/allocator.h"

using namespace tide;
using namespace tide::testing;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible: this test needs one"

// Uploads the case's initial tensors, runs the op on cuda:0, returns the tensors afterwards.
// fused: the context may run cuDNN's fused attention (OpContext::fused_attention); its count
// of such ops is added to *fused_calls when given.
std::vector<HostTensor> run_on_gpu(const OpCase& c, bool fused = false,
                                   int64_t* fused_calls = nullptr) {
  std::vector<HostTensor> out = c.tensors;
  std::vector<void*> device_ptrs;
  std::vector<Tensor> views;
  for (auto& t : out) {
    void* p = nullptr;
    TIDE_CUDA_CHECK(cudaMalloc(&p, t.bytes() > 0 ? t.bytes() : 1));
    TIDE_CUDA_CHECK(cudaMemcpy(p, t.data(), t.bytes(), cudaMemcpyHostToDevice));
    device_ptrs.push_back(p);
    views.emplace_back(p, t.shape, t.dtype, Device::cuda(0));
  }
  // The uploads above ran on the legacy default stream, which the context's non-blocking
  // stream does not wait for: finish them first.
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  OpContext ctx = make_op_context(Device::cuda(0));
  ctx.fused_attention = fused;
  c.run(ctx, views);
  TIDE_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx.stream)));
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());  // also surfaces faults inside the kernels
  for (size_t i = 0; i < out.size(); ++i) {
    TIDE_CUDA_CHECK(
        cudaMemcpy(out[i].data(), device_ptrs[i], out[i].bytes(), cudaMemcpyDeviceToHost));
    TIDE_CUDA_CHECK(cudaFree(device_ptrs[i]));
  }
  if (fused_calls != nullptr) *fused_calls += ctx.handles->fused_attention_calls;
  return out;
}

bool is_16_bit(DType t) {
  return t == DType::BF16 || t == DType::F16;
}
// A 16-bit tensor widened to f32 (exactly); other tensors as they are.
HostTensor as_f32(const HostTensor& t) {
  return is_16_bit(t.dtype) ? widened(t) : t;
}

// Elements of two 16-bit tensors whose bits differ.
int64_t bits_differing(const HostTensor& a, const HostTensor& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.h.size(); ++i) n += a.h[i] != b.h[i];
  return n;
}

// The GPU within `tol` of the CPU (16-bit tensors compared widened), and bitwise repeatable.
// A 16-bit result must moreover carry the CPU's bits in all but a few elements (at most 1%,
// or 2): both round the f32 value to nearest-even, and their f32 values differ by far less
// than an ulp, so they round apart only where one straddles a rounding boundary. A kernel
// that truncates, or rounds twice, differs in about half the elements.
// fused: with cuDNN's fused attention allowed (run_on_gpu), which is held to `tol` only (it
// rounds inside the kernel where the CPU does not); its ops are counted into *fused_calls.
void check_case(const OpCase& c, double tol, bool fused = false, int64_t* fused_calls = nullptr) {
  SCOPED_TRACE(c.name);
  std::vector<HostTensor> cpu = c.tensors;
  c.run(OpContext{}, host_views(cpu));
  const std::vector<HostTensor> gpu1 = run_on_gpu(c, fused, fused_calls),
                                gpu2 = run_on_gpu(c, fused);
  for (size_t i = 0; i < cpu.size(); ++i) {
    const std::string what = c.name + " tensor '" + cpu[i].name + "'";
    expect_close(what, as_f32(gpu1[i]), as_f32(cpu[i]), tol);
    expect_bitwise(what, gpu1[i], gpu2[i]);
    if (fused || !is_16_bit(cpu[i].dtype)) continue;
    const auto n = static_cast<int64_t>(cpu[i].h.size());
    EXPECT_LE(bits_differing(gpu1[i], cpu[i]), std::max<int64_t>(2, n / 100))
        << what << ": of " << n << " elements";
  }
}

void check_all(const std::vector<OpCase>& cases) {
  for (const OpCase& c : cases) check_case(c, c.tol);
}

// cuDNN's fused attention against the CPU, in bf16 and fp16: the attention cases without
// dropout (the fused path's domain), with the context's fused_attention on. cuDNN rounds the
// probabilities (and in the backward the score gradients) to the storage type inside the kernel,
// where tide's kernels and the CPU keep them in f32, so the results are held to 8 steps of the
// storage type (eps = 2^-7 bf16, 2^-10 f16), not to the CPU's bits; a wrong layout, stride or
// mask is off by far more. Bitwise repeatable still (a deterministic backward). The cases whose
// head size cuDNN cannot take (not a multiple of 8) or shape it declines (T = 1 in the backward)
// run tide's kernels; the HS 32 case and the grouped HS 8 one (NKV = 1), forward and backward,
// must have gone through cuDNN: 4 ops per dtype.
TEST(CudaOps, FusedAttentionIn16Bit) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::BF16, DType::F16}) {
    const double eps = dtype == DType::BF16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
    int64_t fused = 0;
    for (const OpCase& c : attention_cases()) {
      if (c.name.find(" p=0 ") == std::string::npos && !c.name.ends_with(" p=0")) continue;
      check_case(in_dtype(c, dtype), c.tol + 8 * eps, /*fused=*/true, &fused);
    }
    EXPECT_EQ(fused, 4) << dtype_name(dtype) << ": attention ops that ran through cuDNN";
  }
}

// The case table in 16-bit storage (in_dtype: every float tensor but the statistics), GPU
// against the CPU's 16-bit op. Both compute in f32 and round each result once, so they differ
// by the case's f32 tolerance plus at most one rounding step of the storage type: tol + eps,
// eps = 2^-7 (bf16) or 2^-10 (f16), one ulp relative. The bitwise cases (tol 0: the same f32
// operations in the same order) stay bitwise, since rounding to nearest-even is a function.
void check_all_in(const std::vector<OpCase>& cases, DType dtype) {
  const double eps = dtype == DType::BF16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
  for (const OpCase& c : cases) {
    const OpCase narrow = in_dtype(c, dtype);
    check_case(narrow, c.tol == 0 ? 0.0 : c.tol + eps);
  }
}

void expect_error_containing(const std::function<void()>& f,
                             const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected a tide::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

}  // namespace

// ---- host-only: the copied Philox equals core/rng.h --------------------------------------

TEST(PhiloxCuh, EqualsCoreRng) {
  const uint64_t seeds[] = {0, 1, 0xDEADBEEFCAFEF00Dull, ~0ull};
  const uint64_t streams[] = {0, 7, 0x123456789ABCDEF0ull, ~0ull};
  for (uint64_t seed : seeds)
    for (uint64_t stream : streams) {
      const PhiloxStream ref{seed, stream};
      for (uint64_t block : {uint64_t{0}, uint64_t{1}, uint64_t{1} << 32, ~uint64_t{0}}) {
        const PhiloxCounter r = ref.block(block);
        const cuda::Philox4 c = cuda::philox_block(seed, stream, block);
        for (int k = 0; k < 4; ++k)
          ASSERT_EQ(c.v[k], r[k]) << seed << " " << stream << " " << block;
      }
      for (uint64_t block = 0; block < 2000; ++block) {
        const PhiloxCounter r = ref.block(block * 7919);
        const cuda::Philox4 c = cuda::philox_block(seed, stream, block * 7919);
        for (int k = 0; k < 4; ++k) ASSERT_EQ(c.v[k], r[k]);
      }
    }
}

TEST(PhiloxCuh, DropoutMultipliersEqualCpuRule) {
  for (float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
    const DropoutSpec spec{p, 42, 17};
    cuda::DropoutParams d;
    d.enabled = spec.enabled();
    d.p = p;
    d.scale = cpu::dropout_keep_scale(p);
    d.seed = spec.seed;
    d.stream = spec.stream;
    // An unaligned start (3) exercises the four-numbers-per-block bookkeeping of the CPU rule.
    const uint64_t first = 3;
    const int64_t n = 4099;
    std::vector<float> mult(n);
    cpu::dropout_multipliers(spec, first, n, mult.data());
    int64_t dropped = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float m = cuda::dropout_multiplier(d, first + j);
      if (spec.enabled()) {
        ASSERT_EQ(m, mult[j]) << "p=" << p << " element " << first + j;
      } else {
        ASSERT_EQ(m, 1.0f);  // disabled: the CUDA kernels multiply by exactly 1
      }
      dropped += m == 0.0f;
    }
    // The mask is not trivial: about p of the elements are dropped.
    EXPECT_NEAR(static_cast<double>(dropped) / n, p, 0.03) << "p=" << p;
  }
}

// The CUDA row counters (philox.cuh) equal the CPU's (cpu/dropout_mask.h), defaults resolved
// on the host as common.cuh's dropout_params does.
TEST(PhiloxCuh, RowCountersEqualCpu) {
  const int64_t T = 13, W = 37, NH = 5;
  for (bool sharded : {false, true}) {
    const DropoutSpec spec =
        sharded ? DropoutSpec{0.1f, 1, 2, 1000003, 7, 41, 4099, 123} : DropoutSpec{0.1f, 1, 2};
    auto params = [&](int64_t width) {
      cuda::DropoutParams d;
      d.seq0 = spec.seq0;
      d.pos0 = spec.pos0;
      d.seq_stride = spec.seq_stride > 0 ? spec.seq_stride : T;
      d.width_full = spec.width_full > 0 ? spec.width_full : width;
      d.col0 = spec.col0;
      return d;
    };
    const cuda::DropoutParams act = params(W), heads = params(NH);
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(cuda::dropout_row_counter(act, b, t), cpu::dropout_row_counter(spec, T, W, b, t));
        for (int64_t h = 0; h < NH; ++h)
          ASSERT_EQ(cuda::attention_dropout_row_counter(heads, b, h, t),
                    cpu::attention_dropout_row_counter(spec, T, NH, b, h, t));
      }
  }
}

// ---- GPU against CPU, per op -------------------------------------------------------------

TEST(CudaOps, Embedding) {
  SKIP_WITHOUT_GPU();
  check_all(embedding_cases());
}

TEST(CudaOps, LayerNorm) {
  SKIP_WITHOUT_GPU();
  check_all(layernorm_cases());
}

TEST(CudaOps, RmsNorm) {
  SKIP_WITHOUT_GPU();
  check_all(rmsnorm_cases());
}

TEST(CudaOps, Matmul) {
  SKIP_WITHOUT_GPU();
  check_all(matmul_cases());
}

TEST(CudaOps, Attention) {
  SKIP_WITHOUT_GPU();
  check_all(attention_cases());
}

TEST(CudaOps, Rope) {
  SKIP_WITHOUT_GPU();
  check_all(rope_cases());
}

TEST(CudaOps, Pointwise) {
  SKIP_WITHOUT_GPU();
  check_all(pointwise_cases());
}

TEST(CudaOps, CrossEntropy) {
  SKIP_WITHOUT_GPU();
  check_all(crossentropy_cases());
}

TEST(CudaOps, EveryOpCaseInBf16) {
  SKIP_WITHOUT_GPU();
  check_all_in(all_op_cases(), DType::BF16);
}

TEST(CudaOps, EveryOpCaseInF16) {
  SKIP_WITHOUT_GPU();
  check_all_in(all_op_cases(), DType::F16);
}

// The mixes of 16-bit training (mixed_dtype_cases: f32 logits and their gradient, f32
// parameter gradients beside 16-bit operands), GPU against the CPU's mixed op, with
// check_all_in's tolerance: the GEMMs split an f32 factor beside a bf16 one into bf16 terms,
// widen an fp16 factor beside an f32 one, and write what cuBLAS cannot through f32 scratch
// (cuda/matmul.cu).
TEST(CudaOps, EveryMixOf16BitTraining) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::BF16, DType::F16}) {
    const double eps = dtype == DType::BF16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
    for (const OpCase& c : mixed_dtype_cases(dtype)) check_case(c, c.tol == 0 ? 0.0 : c.tol + eps);
  }
}

// The fused residual + layernorm kernel has the bits of the GPU's residual_forward then
// layernorm_forward (the same sums in the same order, over the rounded residual).
TEST(CudaOps, ResidualLayernormHasTheBitsOfTheTwoKernels) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (const OpCase& c : layernorm_cases()) {
      if (!c.name.starts_with("residual_layernorm_forward")) continue;
      const OpCase fused = dtype == DType::F32 ? c : in_dtype(c, dtype);
      OpCase two = fused;
      two.run = [](const OpContext& ctx, const std::vector<Tensor>& t) {
        residual_forward(ctx, t[0], t[4], t[5]);
        layernorm_forward(ctx, t[1], t[2], t[3], t[0], t[6], t[7]);
      };
      const std::vector<HostTensor> a = run_on_gpu(fused), b = run_on_gpu(two);
      for (size_t i = 0; i < a.size(); ++i)
        expect_bitwise(
            c.name + " (" + std::string(dtype_name(dtype)) + ") tensor '" + a[i].name + "'", a[i],
            b[i]);
    }
}

// The LM head's backward products in bf16 training at a vocabulary size where cuda/matmul.cu
// splits the f32 logit gradient into bf16 terms in several blocks of tokens (its 256 MiB of
// terms hold 1118 tokens of V = 40000; N = 2560 makes three blocks, the last one short):
// dinp (bf16) and dweight (f32, and bf16 as ZeRO's 16-bit gradients) against the CPU's mixed op.
TEST(CudaOps, HeadProductsSplitTheirF32GradientInBlocksOfTokens) {
  SKIP_WITHOUT_GPU();
  const int64_t N = 2560, C = 16, V = 40000;
  const double tol = kGemmTol + std::ldexp(1.0, -7);
  const HostTensor dout = randn("dout", {N, V}, 41, 1e-3f);
  check_case({"matmul_backward_input head, f32: dout",
              {narrowed(randn("dinp", {N, C}, 42), DType::BF16), dout,
               narrowed(randn("weight", {V, C}, 43), DType::BF16)},
              [](const OpContext& ctx, const std::vector<Tensor>& t) {
                matmul_backward_input(ctx, t[0], t[1], t[2]);
              }},
             tol);
  for (DType grad : {DType::F32, DType::BF16}) {
    const HostTensor dweight = randn("dweight", {V, C}, 44);
    check_case({"matmul_backward_weight head, f32: dout" +
                    std::string(grad == DType::F32 ? " dweight" : ""),
                {grad == DType::F32 ? dweight : narrowed(dweight, DType::BF16), dout,
                 narrowed(randn("inp", {N, C}, 45), DType::BF16)},
                [](const OpContext& ctx, const std::vector<Tensor>& t) {
                  matmul_backward_weight(ctx, t[0], Tensor(), t[1], t[2]);
                }},
               tol);
  }
}

// Ops run on their context's stream: each make_op_context has its own non-blocking stream,
// copies of a context share it, and work on two contexts gives the same results.
TEST(CudaOps, RunOnTheContextStream) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1000;
  HostTensor inp = randn("inp", {n}, 80);
  std::vector<float> ref(n);
  gelu_forward(OpContext{}, Tensor(ref.data(), {n}), Tensor(inp.f.data(), {n}));
  const OpContext a = make_op_context(Device::cuda(0)), b = make_op_context(Device::cuda(0));
  const OpContext a_copy = a;
  ASSERT_NE(a.stream, nullptr);
  ASSERT_NE(b.stream, nullptr);
  EXPECT_NE(a.stream, b.stream);
  EXPECT_EQ(a_copy.stream, a.stream);
  EXPECT_EQ(a_copy.handles, a.handles);
  float *d_in = nullptr, *d_out_a = nullptr, *d_out_b = nullptr;
  TIDE_CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(float)));
  TIDE_CUDA_CHECK(cudaMalloc(&d_out_a, n * sizeof(float)));
  TIDE_CUDA_CHECK(cudaMalloc(&d_out_b, n * sizeof(float)));
  TIDE_CUDA_CHECK(cudaMemcpy(d_in, inp.f.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  const Device dev = a.device;
  gelu_forward(a, Tensor(d_out_a, {n}, DType::F32, dev), Tensor(d_in, {n}, DType::F32, dev));
  gelu_forward(b, Tensor(d_out_b, {n}, DType::F32, dev), Tensor(d_in, {n}, DType::F32, dev));
  // Only the contexts' streams are synchronised: the ops must have been queued there.
  TIDE_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(a.stream)));
  TIDE_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(b.stream)));
  std::vector<float> got_a(n), got_b(n);
  TIDE_CUDA_CHECK(cudaMemcpy(got_a.data(), d_out_a, n * sizeof(float), cudaMemcpyDeviceToHost));
  TIDE_CUDA_CHECK(cudaMemcpy(got_b.data(), d_out_b, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(got_a[i], ref[i], 1e-5 * (std::fabs(ref[i]) + 1));
  EXPECT_EQ(got_a, got_b);
  TIDE_CUDA_CHECK(cudaFree(d_in));
  TIDE_CUDA_CHECK(cudaFree(d_out_a));
  TIDE_CUDA_CHECK(cudaFree(d_out_b));
}

// Bad ids are not checked on the host (no round trip per op): they give NaN rows, and leave
// the other rows untouched; nothing reads or writes out of bounds.
TEST(CudaOps, BadTokenAndTargetGiveNaNRows) {
  SKIP_WITHOUT_GPU();
  const int B = 2, T = 3, C = 4, V = 10;
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 99};  // (b=1, t=2) is outside [0, 10)
  int32_t* d_tokens = nullptr;
  float* d_buf = nullptr;
  TIDE_CUDA_CHECK(cudaMalloc(&d_tokens, tokens.size() * sizeof(int32_t)));
  TIDE_CUDA_CHECK(
      cudaMemcpy(d_tokens, tokens.data(), tokens.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  TIDE_CUDA_CHECK(cudaMalloc(&d_buf, 1024 * sizeof(float)));
  TIDE_CUDA_CHECK(cudaMemset(d_buf, 0, 1024 * sizeof(float)));
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  const OpContext ctx = make_op_context(Device::cuda(0));
  const Device dev = ctx.device;
  const Tensor tok(d_tokens, {B, T}, DType::I32, dev);
  embedding_forward(ctx, Tensor(d_buf, {B, T, C}, DType::F32, dev), tok,
                    Tensor(d_buf + 100, {V, C}, DType::F32, dev),
                    Tensor(d_buf + 200, {T, C}, DType::F32, dev));
  // As targets of a (6, V) logits buffer: 99 >= V gives a NaN loss (negative would be "ignore").
  const Tensor targets(d_tokens, {B * T}, DType::I32, dev);
  crossentropy_forward(ctx, Tensor(d_buf + 300, {B * T}, DType::F32, dev),
                       Tensor(d_buf + 400, {B * T, V}, DType::F32, dev), targets);
  TIDE_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx.stream)));
  std::vector<float> emb(B * T * C), losses(B * T);
  TIDE_CUDA_CHECK(
      cudaMemcpy(emb.data(), d_buf, emb.size() * sizeof(float), cudaMemcpyDeviceToHost));
  TIDE_CUDA_CHECK(cudaMemcpy(losses.data(), d_buf + 300, losses.size() * sizeof(float),
                             cudaMemcpyDeviceToHost));
  for (int i = 0; i < B * T * C; ++i) EXPECT_EQ(std::isnan(emb[i]), i / C == 5) << "element " << i;
  for (int i = 0; i < B * T; ++i) EXPECT_EQ(std::isnan(losses[i]), i == 5) << "row " << i;
  TIDE_CUDA_CHECK(cudaFree(d_tokens));
  TIDE_CUDA_CHECK(cudaFree(d_buf));
}

// Asking for a GPU index that does not exist is one clear line, when the context is made.
TEST(CudaOps, MissingDeviceIsAClearError) {
  SKIP_WITHOUT_GPU();
  int n = 0;
  TIDE_CUDA_CHECK(cudaGetDeviceCount(&n));
  expect_error_containing([&] { make_op_context(Device::cuda(n)); },
                          {"make_op_context", fmt::format("cuda:{}", n), "GPU(s) are visible"});
}

// Without a GPU, making a CUDA context fails with a line that says what to do; an op given a
// CUDA-labelled context that make_op_context did not make fails before touching memory.
TEST(CudaOps, NoGpuIsAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible: this checks the message without one";
  expect_error_containing([&] { make_op_context(Device::cuda(0)); },
                          {"make_op_context", "no CUDA GPU is visible", "device=cpu"});
  std::vector<float> dummy(8);
  OpContext ctx;
  ctx.device = Device::cuda(0);
  const Tensor t(dummy.data(), {8}, DType::F32, ctx.device);
  expect_error_containing([&] { gelu_forward(ctx, t, t); },
                          {"gelu_forward", "no CUDA stream or handles", "make_op_context"});
}

// The mover's CUDA half (kernels/mover.h): an upload, an op and a download queued on one
// stream; a second stream that waits on an event of the first sees its writes; fill_zero.
TEST(CudaMover, CopiesAndEventsOrderStreams) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 4096;
  HostTensor inp = randn("inp", {n}, 81);
  std::vector<float> ref(n), got(n, -1.0f), zeros_back(n, -1.0f);
  gelu_forward(OpContext{}, Tensor(ref.data(), {n}), Tensor(inp.f.data(), {n}));
  const OpContext a = make_op_context(Device::cuda(0)), b = make_op_context(Device::cuda(0));
  float *d_x = nullptr, *d_y = nullptr;
  TIDE_CUDA_CHECK(cudaMalloc(&d_x, n * sizeof(float)));
  TIDE_CUDA_CHECK(cudaMalloc(&d_y, n * sizeof(float)));
  const Tensor x(d_x, {n}, DType::F32, a.device), y(d_y, {n}, DType::F32, a.device);
  copy(a, x, Tensor(inp.f.data(), {n}));
  wait_event(b, record_event(a));
  gelu_forward(b, y, x);
  copy(b, Tensor(got.data(), {n}), y);
  fill_zero(b, y);
  copy(b, Tensor(zeros_back.data(), {n}), y);
  synchronize(b);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(got[i], ref[i], 1e-5 * (std::fabs(ref[i]) + 1));
  EXPECT_EQ(zeros_back, std::vector<float>(n, 0.0f));
  TIDE_CUDA_CHECK(cudaFree(d_x));
  TIDE_CUDA_CHECK(cudaFree(d_y));
}

// make_host_allocator's page-locked memory (memory/allocator.h) is what the simulated device
// assumes of a GPU: cudaMemcpyAsync through it returns at once, while through pageable memory it
// returns only once the copy (after the work queued before it) is done. Behind the copies, a
// (2048,2048) x (2048,2048) product holds the stream for a few milliseconds.
TEST(CudaMover, PinnedCopiesAreQueuedAndPageableOnesWait) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 2048;
  const OpContext ctx = make_op_context(Device::cuda(0));
  const std::unique_ptr<Allocator> pinned = make_host_allocator(ctx.device, /*pinned=*/true);
  EXPECT_EQ(pinned->tier(), Tier::HOST);
  const size_t bytes = n * n * sizeof(float);
  void* host = pinned->allocate(bytes, "the download");
  cudaPointerAttributes attr{};
  TIDE_CUDA_CHECK(cudaPointerGetAttributes(&attr, host));
  EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "not page-locked";
  std::vector<float> pageable(n * n);
  TIDE_CUDA_CHECK(cudaPointerGetAttributes(&attr, pageable.data()));
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
  float* d = nullptr;
  TIDE_CUDA_CHECK(cudaMalloc(&d, 3 * bytes));
  TIDE_CUDA_CHECK(cudaMemset(d, 0, 3 * bytes));
  const Tensor a(d, {n, n}, DType::F32, ctx.device), w(d + n * n, {n, n}, DType::F32, ctx.device),
      out(d + 2 * n * n, {n, n}, DType::F32, ctx.device);
  auto stream_busy = [&](void* into) {
    for (int i = 0; i < 8; ++i) matmul_forward(ctx, out, a, w, Tensor());
    copy(ctx, Tensor(into, {n, n}), out);
    return cudaStreamQuery(static_cast<cudaStream_t>(ctx.stream)) == cudaErrorNotReady;
  };
  EXPECT_TRUE(stream_busy(host)) << "a copy into page-locked memory waited for the stream";
  synchronize(ctx);
  EXPECT_FALSE(stream_busy(pageable.data())) << "a copy into pageable memory did not wait";
  synchronize(ctx);
  TIDE_CUDA_CHECK(cudaFree(d));
  pinned->free(host, bytes);
  EXPECT_EQ(pinned->allocated(), 0u);
}

// make_copy_context's stream runs beside the compute stream (ZeRO-Offload's copies, issue #27):
// a download on it of memory the compute stream does not touch finishes while that stream is
// still busy with products; one queued after an event of the compute stream waits for them.
TEST(CudaMover, ACopyStreamRunsBesideTheComputeStream) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 2048;
  const OpContext ctx = make_op_context(Device::cuda(0));
  const OpContext copies = make_copy_context(ctx);
  EXPECT_NE(copies.stream, ctx.stream);
  EXPECT_EQ(copies.device, ctx.device);
  EXPECT_EQ(copies.handles->cublas, nullptr) << "a copy stream needs no cuBLAS handle";
  const std::unique_ptr<Allocator> pinned = make_host_allocator(ctx.device, /*pinned=*/true);
  const size_t bytes = n * n * sizeof(float);
  auto* host = static_cast<float*>(pinned->allocate(bytes, "the download"));
  float* d = nullptr;
  TIDE_CUDA_CHECK(cudaMalloc(&d, 4 * bytes));
  TIDE_CUDA_CHECK(cudaMemset(d, 0, 4 * bytes));
  const Tensor a(d, {n, n}, DType::F32, ctx.device), w(d + n * n, {n, n}, DType::F32, ctx.device),
      out(d + 2 * n * n, {n, n}, DType::F32, ctx.device),
      other(d + 3 * n * n, {n, n}, DType::F32, ctx.device);
  std::vector<float> ones(n * n, 1.0f);
  copy(ctx, other, Tensor(ones.data(), {n, n}));  // pageable: returns once done
  for (int i = 0; i < 8; ++i) matmul_forward(ctx, out, a, w, Tensor());
  copy(copies, Tensor(host, {n, n}), other);
  synchronize(copies);
  EXPECT_EQ(cudaStreamQuery(static_cast<cudaStream_t>(ctx.stream)), cudaErrorNotReady)
      << "the copy stream waited for the compute stream";
  EXPECT_EQ(host[0], 1.0f);
  EXPECT_EQ(host[n * n - 1], 1.0f);
  for (int i = 0; i < 8; ++i) matmul_forward(ctx, out, a, w, Tensor());
  wait_event(copies, record_event(ctx));
  copy(copies, Tensor(host, {n, n}), out);
  synchronize(copies);
  EXPECT_EQ(cudaStreamQuery(static_cast<cudaStream_t>(ctx.stream)), cudaSuccess)
      << "the copy did not wait for the compute stream's event";
  EXPECT_EQ(host[0], 0.0f);  // 0 x 0
  synchronize(ctx);
  TIDE_CUDA_CHECK(cudaFree(d));
  pinned->free(host, bytes);
}
