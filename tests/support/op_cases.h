#pragma once
// The op case table: every op of the op API (kernels/ops.h) on a few shapes each, as host
// tensors and a call, in the style of ggml's test-backend-ops. Each backend's test runs the
// whole table against the CPU reference: the simulated device in test_kernels
// (test_backend_ops.cpp), CUDA in test_gpu_kernels. A new op adds its cases here once.
//
// An OpCase is a list of host tensors (random values, zeros, or token ids) and a function that
// calls one op on views of them. Gradient buffers start with random values, not zeros, so
// that "backward ops accumulate" is checked too; crossentropy_backward is also run in place
// (dlogits aliasing logits).
//
// Tolerance: |got - cpu| <= tol * (|cpu| + rms(cpu)) per element; the rms term keeps elements
// near zero (after cancellation) from demanding a relative precision that f32 sums in another
// order cannot give. tol = 0 demands bitwise equality: used where a backend does the same f32
// operations in the same order as the CPU (residual, dropout, embedding).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tide/core/tensor.h"
#include "tide/kernels/ops.h"

namespace tide::testing {

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

HostTensor randn(const std::string& name, Shape shape, uint64_t seed, float scale = 1.0f);
HostTensor zeros(const std::string& name, Shape shape);
// Ids uniform in [0, hi); every `ignore_every`-th one (if > 0) set to -1 (ignored target).
HostTensor ids(const std::string& name, Shape shape, int32_t hi, uint64_t seed,
               int ignore_every = 0);

using OpRun = std::function<void(const OpContext&, const std::vector<Tensor>&)>;

struct OpCase {
  std::string name;
  std::vector<HostTensor> tensors;
  OpRun run;
  double tol = 1e-5;
};

// Views of the tensors on the host (the CPU reference runs on these).
std::vector<Tensor> host_views(std::vector<HostTensor>& ts);

// gtest expectations: `got` within the case's tolerance of the CPU's `cpu` (tol 0: bitwise),
// and two tensors bit for bit equal.
void expect_close(const std::string& what, const HostTensor& got, const HostTensor& cpu,
                  double tol);
void expect_bitwise(const std::string& what, const HostTensor& a, const HostTensor& b);

// Tolerances: element-wise and row-reduction kernels, and GEMM-based ops (cuBLAS and OpenBLAS
// sum the K products in different orders).
constexpr double kTol = 1e-5;
constexpr double kGemmTol = 1e-4;

std::vector<OpCase> embedding_cases();
std::vector<OpCase> layernorm_cases();
std::vector<OpCase> matmul_cases();
std::vector<OpCase> attention_cases();
std::vector<OpCase> pointwise_cases();
std::vector<OpCase> crossentropy_cases();
// All of the above.
std::vector<OpCase> all_op_cases();

}  // namespace tide::testing
