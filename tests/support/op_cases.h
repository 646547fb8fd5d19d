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
#include <utility>
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
  std::vector<uint16_t> h;   // dtype BF16 or F16 (bit patterns)

  const void* data() const {
    if (dtype == DType::F32) return f.data();
    return dtype == DType::I32 ? static_cast<const void*>(ids.data()) : h.data();
  }
  void* data() { return const_cast<void*>(std::as_const(*this).data()); }
  size_t bytes() const { return static_cast<size_t>(shape.numel()) * dtype_size(dtype); }
};

HostTensor randn(const std::string& name, Shape shape, uint64_t seed, float scale = 1.0f);
HostTensor zeros(const std::string& name, Shape shape);
// Ids uniform in [0, hi); every `ignore_every`-th one (if > 0) set to -1 (ignored target).
HostTensor ids(const std::string& name, Shape shape, int32_t hi, uint64_t seed,
               int ignore_every = 0);

// A float tensor stored in `dtype` (bf16 or f16: each value rounded to nearest-even), and a
// 16-bit one widened back to f32 (exactly).
HostTensor narrowed(const HostTensor& t, DType dtype);
HostTensor widened(const HostTensor& t);

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
std::vector<OpCase> rmsnorm_cases();
std::vector<OpCase> matmul_cases();
std::vector<OpCase> attention_cases();
std::vector<OpCase> rope_cases();
std::vector<OpCase> pointwise_cases();
std::vector<OpCase> crossentropy_cases();
// All of the above.
std::vector<OpCase> all_op_cases();
// The case with its float tensors stored in `dtype` (bf16 or f16), except the statistics ops.h
// keeps in f32 (layernorm's mean and rstd, rmsnorm's rstd, cross-entropy's losses) and RoPE's
// inv_freq, an f32 input.
OpCase in_dtype(const OpCase& c, DType dtype);
// The mixes 16-bit training calls (the tensors a device keeps in their own dtype, ops.cpp's
// kOwnFloat): each case of those ops in `dtype`, once per mix, with the mix's tensors left f32:
// the logits (matmul_forward's out) and their gradient (the backward products' dout), and
// f32 parameter gradients (the weight-gradient ops' and embedding_backward's) beside 16-bit
// activations, alone and with the logits' gradient. The name says which stay f32.
std::vector<OpCase> mixed_dtype_cases(DType dtype);

}  // namespace tide::testing
