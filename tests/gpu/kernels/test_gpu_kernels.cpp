// The CUDA kernels of the op API against the CPU reference, in the style of ggml's
// test-backend-ops: ONE harness runs every op case on both devices and compares every tensor
// the op touches.
//
// An OpCase is a list of host tensors (random values, zeros, or token ids) and a function
// that calls one op on views of them. The harness
//   1. runs the op on copies of the tensors with a CPU context (the reference);
//   2. uploads the same initial tensors to the GPU and runs the op with a CUDA context, twice;
//   3. compares, for every tensor (inputs too, which must come back unchanged):
//      GPU vs CPU within the case's tolerance, and GPU run 1 vs run 2 bit for bit (the CUDA
//      kernels are deterministic: no floating-point atomics, fixed reduction orders).
// Gradient buffers start with random values, not zeros, so that "backward ops accumulate"
// is checked too; crossentropy_backward is run in place (dlogits aliasing logits).
//
// Tolerance: |gpu - cpu| <= tol * (|cpu| + rms(cpu)) per element; the rms term keeps
// elements near zero (after cancellation) from demanding a relative precision that f32 sums in
// another order cannot give. tol = 0 demands bitwise equality: used where the GPU does the
// same f32 operations in the same order as the CPU (residual, dropout, embedding).
//
// Everything on the GPU is skipped when no GPU is visible; PhiloxCuh.* runs everywhere.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tide/core/device.h"
#include "tide/core/rng.h"
#include "tide/core/tensor.h"
#include "tide/kernels/cpu/dropout_mask.h"
#include "tide/kernels/cuda/cuda_check.h"
#include "tide/kernels/cuda/philox.cuh"
#include "tide/kernels/ops.h"

using namespace tide;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible: this test needs one"

// ---- host tensors of a case --------------------------------------------------------------

struct HostTensor {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  std::vector<float> f;      // dtype F32
  std::vector<int32_t> ids;  // dtype I32

  void* data() { return dtype == DType::F32 ? static_cast<void*>(f.data()) : ids.data(); }
  size_t bytes() const {
    return static_cast<size_t>(shape.numel()) * (dtype == DType::F32 ? sizeof(float) : 4);
  }
};

HostTensor randn(const std::string& name, Shape shape, uint64_t seed, float scale = 1.0f) {
  HostTensor t{name, shape, DType::F32, std::vector<float>(shape.numel()), {}};
  const PhiloxStream rng{seed, 11};
  for (int64_t i = 0; i < shape.numel(); ++i) t.f[i] = scale * rng.normal(i);
  return t;
}

HostTensor zeros(const std::string& name, Shape shape) {
  return HostTensor{name, shape, DType::F32, std::vector<float>(shape.numel(), 0.0f), {}};
}

// Ids uniform in [0, hi); every `ignore_every`-th one (if > 0) set to -1 (ignored target).
HostTensor ids(const std::string& name, Shape shape, int32_t hi, uint64_t seed,
               int ignore_every = 0) {
  HostTensor t{name, shape, DType::I32, {}, std::vector<int32_t>(shape.numel())};
  const PhiloxStream rng{seed, 13};
  for (int64_t i = 0; i < shape.numel(); ++i) {
    t.ids[i] = static_cast<int32_t>(rng.uint(i) % static_cast<uint32_t>(hi));
    if (ignore_every > 0 && i % ignore_every == ignore_every - 1) t.ids[i] = -1;
  }
  return t;
}

// ---- the harness -------------------------------------------------------------------------

using OpRun = std::function<void(const OpContext&, const std::vector<Tensor>&)>;

struct OpCase {
  std::string name;
  std::vector<HostTensor> tensors;
  OpRun run;
  double tol = 1e-5;
};

std::vector<Tensor> host_views(std::vector<HostTensor>& ts) {
  std::vector<Tensor> v;
  for (auto& t : ts) v.emplace_back(t.data(), t.shape, t.dtype, Device::cpu());
  return v;
}

// Uploads the case's initial tensors, runs the op on cuda:0, returns the tensors afterwards.
std::vector<HostTensor> run_on_gpu(const OpCase& c) {
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
  const OpContext ctx = make_op_context(Device::cuda(0));
  c.run(ctx, views);
  TIDE_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx.stream)));
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());  // also surfaces faults inside the kernels
  for (size_t i = 0; i < out.size(); ++i) {
    TIDE_CUDA_CHECK(
        cudaMemcpy(out[i].data(), device_ptrs[i], out[i].bytes(), cudaMemcpyDeviceToHost));
    TIDE_CUDA_CHECK(cudaFree(device_ptrs[i]));
  }
  return out;
}

void expect_close(const std::string& what, const HostTensor& gpu, const HostTensor& cpu,
                  double tol) {
  if (cpu.dtype == DType::I32) {
    EXPECT_EQ(gpu.ids, cpu.ids) << what;
    return;
  }
  double sq = 0.0;
  for (float x : cpu.f) sq += static_cast<double>(x) * x;
  const double rms = cpu.f.empty() ? 0.0 : std::sqrt(sq / cpu.f.size());
  int64_t worst = -1, n_bad = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < cpu.f.size(); ++i) {
    const double ref = cpu.f[i], got = gpu.f[i];
    const double err = std::fabs(got - ref);
    const double allowed = tol * (std::fabs(ref) + rms);
    const bool bad = tol == 0.0 ? std::memcmp(&cpu.f[i], &gpu.f[i], sizeof(float)) != 0
                                : !(err <= allowed);  // NaN is bad
    if (bad) {
      ++n_bad;
      const double ratio = allowed > 0 ? err / allowed : INFINITY;
      if (worst < 0 || ratio > worst_ratio || std::isnan(ratio)) worst = i, worst_ratio = ratio;
    }
  }
  EXPECT_EQ(n_bad, 0) << what << ": " << n_bad << " of " << cpu.f.size()
                      << " elements differ from the CPU beyond tol " << tol << " (rms " << rms
                      << "); worst at " << worst << ": gpu " << (worst >= 0 ? gpu.f[worst] : 0.0f)
                      << " cpu " << (worst >= 0 ? cpu.f[worst] : 0.0f);
}

void expect_bitwise(const std::string& what, const HostTensor& a, const HostTensor& b) {
  const bool same =
      a.dtype == DType::F32 ? std::memcmp(a.f.data(), b.f.data(), a.bytes()) == 0 : a.ids == b.ids;
  EXPECT_TRUE(same) << what << ": two runs of the same op on the same inputs differ";
}

void check_case(const OpCase& c) {
  SCOPED_TRACE(c.name);
  std::vector<HostTensor> cpu = c.tensors;
  c.run(OpContext{}, host_views(cpu));
  const std::vector<HostTensor> gpu1 = run_on_gpu(c), gpu2 = run_on_gpu(c);
  for (size_t i = 0; i < cpu.size(); ++i) {
    const std::string what = c.name + " tensor '" + cpu[i].name + "'";
    expect_close(what, gpu1[i], cpu[i], c.tol);
    expect_bitwise(what, gpu1[i], gpu2[i]);
  }
}

// Tolerances: element-wise and row-reduction kernels, and GEMM-based ops (cuBLAS and OpenBLAS
// sum the K products in different orders).
constexpr double kTol = 1e-5;
constexpr double kGemmTol = 1e-4;

// ---- the cases ---------------------------------------------------------------------------

std::vector<OpCase> embedding_cases() {
  std::vector<OpCase> cases;
  // V small against B*T, so tokens repeat and the backward's scatter-add collides.
  for (auto [B, T, C, V] : {std::array<int, 4>{3, 17, 40, 50}, {2, 64, 96, 1000}}) {
    const std::string dims = fmt::format("B={} T={} C={} V={}", B, T, C, V);
    cases.push_back({"embedding_forward " + dims,
                     {zeros("out", {B, T, C}), ids("tokens", {B, T}, V, 1), randn("wte", {V, C}, 2),
                      randn("wpe", {T + 3, C}, 3)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       embedding_forward(ctx, t[0], t[1], t[2], t[3]);
                     },
                     0.0});
    cases.push_back({"embedding_backward " + dims,
                     {randn("dwte", {V, C}, 4), randn("dwpe", {T + 3, C}, 5),
                      randn("dout", {B, T, C}, 6), ids("tokens", {B, T}, V, 7)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       embedding_backward(ctx, t[0], t[1], t[2], t[3]);
                     },
                     0.0});
  }
  return cases;
}

std::vector<OpCase> layernorm_cases() {
  std::vector<OpCase> cases;
  // N above one 64-row chunk of the weight gradient; C odd, and C = GPT-2's 768.
  for (auto [N, C] : {std::array<int64_t, 2>{130, 67}, {4, 768}, {1, 5}}) {
    const std::string dims = fmt::format("N={} C={}", N, C);
    // Statistics from the CPU forward, so that both backward runs see the same mean/rstd.
    HostTensor inp = randn("inp", {N, C}, 10, 2.0f);
    for (auto& x : inp.f) x += 0.5f;  // a non-zero mean
    HostTensor weight = randn("weight", {C}, 11), bias = randn("bias", {C}, 12);
    HostTensor out = zeros("out", {N, C}), mean = zeros("mean", {N}), rstd = zeros("rstd", {N});
    layernorm_forward(OpContext{}, Tensor(out.f.data(), out.shape), Tensor(mean.f.data(), {N}),
                      Tensor(rstd.f.data(), {N}), Tensor(inp.f.data(), inp.shape),
                      Tensor(weight.f.data(), {C}), Tensor(bias.f.data(), {C}));
    cases.push_back(
        {"layernorm_forward " + dims,
         {zeros("out", {N, C}), zeros("mean", {N}), zeros("rstd", {N}), inp, weight, bias},
         [](const OpContext& ctx, const std::vector<Tensor>& t) {
           layernorm_forward(ctx, t[0], t[1], t[2], t[3], t[4], t[5]);
         },
         kTol});
    cases.push_back(
        {"layernorm_backward_input " + dims,
         {randn("dinp", {N, C}, 13), randn("dout", {N, C}, 14), inp, weight, mean, rstd},
         [](const OpContext& ctx, const std::vector<Tensor>& t) {
           layernorm_backward_input(ctx, t[0], t[1], t[2], t[3], t[4], t[5]);
         },
         kTol});
    cases.push_back({"layernorm_backward_weight " + dims,
                     {randn("dweight", {C}, 15), randn("dbias", {C}, 16), randn("dout", {N, C}, 17),
                      inp, mean, rstd},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       layernorm_backward_weight(ctx, t[0], t[1], t[2], t[3], t[4], t[5]);
                     },
                     kTol});
  }
  return cases;
}

std::vector<OpCase> matmul_cases() {
  std::vector<OpCase> cases;
  // Odd sizes, N above one 64-row chunk of the bias gradient, and a (B,T,C) input.
  for (auto [N, C, OC] : {std::array<int64_t, 3>{70, 33, 65}, {128, 64, 192}, {1, 7, 3}}) {
    const std::string dims = fmt::format("N={} C={} OC={}", N, C, OC);
    for (bool with_bias : {true, false}) {
      const std::string b = with_bias ? " bias" : " no-bias";
      cases.push_back({"matmul_forward " + dims + b,
                       {zeros("out", {N, OC}), randn("inp", {N, C}, 20),
                        randn("weight", {OC, C}, 21), randn("bias", {OC}, 22)},
                       [with_bias](const OpContext& ctx, const std::vector<Tensor>& t) {
                         matmul_forward(ctx, t[0], t[1], t[2], with_bias ? t[3] : Tensor());
                       },
                       kGemmTol});
      cases.push_back({"matmul_backward_weight " + dims + b,
                       {randn("dweight", {OC, C}, 23), randn("dbias", {OC}, 24),
                        randn("dout", {N, OC}, 25), randn("inp", {N, C}, 26)},
                       [with_bias](const OpContext& ctx, const std::vector<Tensor>& t) {
                         matmul_backward_weight(ctx, t[0], with_bias ? t[1] : Tensor(), t[2], t[3]);
                       },
                       kGemmTol});
    }
    cases.push_back(
        {"matmul_backward_input " + dims,
         {randn("dinp", {N, C}, 27), randn("dout", {N, OC}, 28), randn("weight", {OC, C}, 29)},
         [](const OpContext& ctx, const std::vector<Tensor>& t) {
           matmul_backward_input(ctx, t[0], t[1], t[2]);
         },
         kGemmTol});
  }
  cases.push_back({"matmul_forward (B,T,C) input",
                   {zeros("out", {2, 5, 24}), randn("inp", {2, 5, 16}, 30),
                    randn("weight", {24, 16}, 31), randn("bias", {24}, 32)},
                   [](const OpContext& ctx, const std::vector<Tensor>& t) {
                     matmul_forward(ctx, t[0], t[1], t[2], t[3]);
                   },
                   kGemmTol});
  return cases;
}

std::vector<OpCase> attention_cases() {
  std::vector<OpCase> cases;
  for (auto [B, T, C, NH] : {std::array<int64_t, 4>{2, 37, 48, 4}, {1, 64, 64, 2}, {1, 1, 8, 1}}) {
    for (auto [p, sharded] : {std::pair{0.0f, false}, {0.2f, false}, {0.2f, true}}) {
      // Sharded: sequences 2.., positions 3.. of T+5, heads 1.. of NH+3 (global coordinates).
      const DropoutSpec dropout =
          sharded ? DropoutSpec{p, 1234, 99, 2, 3, T + 5, NH + 3, 1} : DropoutSpec{p, 1234, 99};
      const std::string dims =
          fmt::format("B={} T={} C={} NH={} p={}{}", B, T, C, NH, p, sharded ? " sharded" : "");
      const int nh = static_cast<int>(NH);
      HostTensor qkv = randn("qkv", {B, T, 3 * C}, 40);
      // preatt/att from the CPU forward, so that both backward runs start from the same ones.
      HostTensor out = zeros("out", {B, T, C}), preatt = zeros("preatt", {B, NH, T, T}),
                 att = zeros("att", {B, NH, T, T});
      attention_forward(OpContext{}, Tensor(out.f.data(), out.shape),
                        Tensor(preatt.f.data(), preatt.shape), Tensor(att.f.data(), att.shape),
                        Tensor(qkv.f.data(), qkv.shape), nh, dropout);
      cases.push_back({"attention_forward " + dims,
                       {zeros("out", {B, T, C}), zeros("preatt", {B, NH, T, T}),
                        zeros("att", {B, NH, T, T}), qkv},
                       [nh, dropout](const OpContext& ctx, const std::vector<Tensor>& t) {
                         attention_forward(ctx, t[0], t[1], t[2], t[3], nh, dropout);
                       },
                       kGemmTol});
      cases.push_back(
          {"attention_backward " + dims,
           {randn("dqkv", {B, T, 3 * C}, 41), randn("dout", {B, T, C}, 42), qkv, preatt, att},
           [nh, dropout](const OpContext& ctx, const std::vector<Tensor>& t) {
             attention_backward(ctx, t[0], t[1], t[2], t[3], t[4], nh, dropout);
           },
           kGemmTol});
    }
  }
  return cases;
}

std::vector<OpCase> pointwise_cases() {
  std::vector<OpCase> cases;
  for (int64_t n : {1, 1001, 4096}) {
    const std::string dims = fmt::format("n={}", n);
    cases.push_back(
        {"gelu_forward " + dims,
         {zeros("out", {n}), randn("inp", {n}, 50, 3.0f)},
         [](const OpContext& ctx, const std::vector<Tensor>& t) { gelu_forward(ctx, t[0], t[1]); },
         kTol});
    cases.push_back({"gelu_backward " + dims,
                     {randn("dinp", {n}, 51), randn("dout", {n}, 52), randn("inp", {n}, 53, 3.0f)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       gelu_backward(ctx, t[0], t[1], t[2]);
                     },
                     kTol});
    cases.push_back({"residual_forward " + dims,
                     {zeros("out", {n}), randn("a", {n}, 54), randn("b", {n}, 55)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       residual_forward(ctx, t[0], t[1], t[2]);
                     },
                     0.0});
    cases.push_back({"residual_backward " + dims,
                     {randn("da", {n}, 56), randn("db", {n}, 57), randn("dout", {n}, 58)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       residual_backward(ctx, t[0], t[1], t[2]);
                     },
                     0.0});
  }
  // Dropout masks must be the CPU's bit for bit: the outputs are compared exactly. Shapes
  // (B,T,W) with rows not a multiple of 4 long, and specs with and without global coordinates
  // (rows then start at counters that are not multiples of 4).
  for (auto [B, T, W] : {std::array<int64_t, 3>{1, 1, 1}, {3, 7, 143}, {2, 16, 128}}) {
    for (float p : {0.0f, 0.1f, 0.5f}) {
      for (bool sharded : {false, true}) {
        const DropoutSpec d =
            sharded ? DropoutSpec{p, 77, 5, 3, 5, T + 9, W + 30, 13} : DropoutSpec{p, 77, 5};
        const Shape shape{B, T, W};
        const std::string name =
            fmt::format("B={} T={} W={} p={}{}", B, T, W, p, sharded ? " sharded" : "");
        cases.push_back({"dropout_forward " + name,
                         {zeros("out", shape), randn("inp", shape, 59)},
                         [d](const OpContext& ctx, const std::vector<Tensor>& t) {
                           dropout_forward(ctx, t[0], t[1], d);
                         },
                         0.0});
        cases.push_back({"dropout_forward in place " + name,
                         {randn("x", shape, 60)},
                         [d](const OpContext& ctx, const std::vector<Tensor>& t) {
                           dropout_forward(ctx, t[0], t[0], d);
                         },
                         0.0});
        cases.push_back({"dropout_backward " + name,
                         {randn("dinp", shape, 61), randn("dout", shape, 62)},
                         [d](const OpContext& ctx, const std::vector<Tensor>& t) {
                           dropout_backward(ctx, t[0], t[1], d);
                         },
                         0.0});
      }
    }
  }
  return cases;
}

std::vector<OpCase> crossentropy_cases() {
  std::vector<OpCase> cases;
  // GPT-2's vocabulary on a few rows, and many short rows with ignored targets.
  for (auto [N, V] : {std::array<int64_t, 2>{3, 50257}, {40, 100}, {1, 1}}) {
    const std::string dims = fmt::format("N={} V={}", N, V);
    const int32_t v = static_cast<int32_t>(V);
    cases.push_back(
        {"crossentropy_forward " + dims,
         {zeros("losses", {N}), randn("logits", {N, V}, 70, 4.0f), ids("targets", {N}, v, 71, 7)},
         [](const OpContext& ctx, const std::vector<Tensor>& t) {
           crossentropy_forward(ctx, t[0], t[1], t[2]);
         },
         kTol});
    cases.push_back({"crossentropy_backward " + dims,
                     {randn("dlogits", {N, V}, 72), randn("logits", {N, V}, 73, 4.0f),
                      ids("targets", {N}, v, 74, 7)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       crossentropy_backward(ctx, t[0], t[1], t[2], 0.125f);
                     },
                     kTol});
    cases.push_back({"crossentropy_backward in place " + dims,
                     {randn("logits", {N, V}, 75, 4.0f), ids("targets", {N}, v, 76, 7)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       crossentropy_backward(ctx, t[0], t[0], t[1], 0.125f);
                     },
                     kTol});
  }
  return cases;
}

void check_all(const std::vector<OpCase>& cases) {
  for (const OpCase& c : cases) check_case(c);
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

// ---- host-only: every case is well formed ----------------------------------------------
// Runs all the cases above on the CPU alone (twice, bitwise equal), so that a case with a
// wrong shape or argument fails here, on any machine, and not first on a GPU machine.
TEST(OpCases, RunOnTheCpu) {
  for (const auto& cases : {embedding_cases(), layernorm_cases(), matmul_cases(), attention_cases(),
                            pointwise_cases(), crossentropy_cases()}) {
    for (const OpCase& c : cases) {
      SCOPED_TRACE(c.name);
      std::vector<HostTensor> a = c.tensors, b = c.tensors;
      ASSERT_NO_THROW(c.run(OpContext{}, host_views(a)));
      c.run(OpContext{}, host_views(b));
      for (size_t i = 0; i < a.size(); ++i) expect_bitwise(c.name + " " + a[i].name, a[i], b[i]);
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

TEST(CudaOps, Matmul) {
  SKIP_WITHOUT_GPU();
  check_all(matmul_cases());
}

TEST(CudaOps, Attention) {
  SKIP_WITHOUT_GPU();
  check_all(attention_cases());
}

TEST(CudaOps, Pointwise) {
  SKIP_WITHOUT_GPU();
  check_all(pointwise_cases());
}

TEST(CudaOps, CrossEntropy) {
  SKIP_WITHOUT_GPU();
  check_all(crossentropy_cases());
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
