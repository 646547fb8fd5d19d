// The op case table's dtype axis (issue #26, the CPU reference): every op takes bf16 and f16
// storage for its float tensors, each case run against the f32 op on the same values.
//
// Which tensors go 16-bit: every float tensor of a case except the statistics (layernorm's
// mean and rstd, rmsnorm's rstd, cross-entropy's losses) and RoPE's inv_freq, which ops.h keeps
// in f32 (in_dtype). The inputs are thereby rounded to the dtype, so the f32 reference sees
// exactly the values the 16-bit op reads.
// Two checks per written tensor:
//  * semantics: within half an ulp of the f32 result (compute in f32, round to nearest once);
//    a truncating store, or a kernel computing in 16-bit, fails it;
//  * plumbing: bit for bit the f32 result rounded to nearest-even, so no tensor is left
//    unwritten, unrounded, or (for the accumulating backward ops) restarted from zero.
// The matmul ops in bf16 on a CPU with AMX take the native bf16 GEMM (cpu/gemm_bf16.h), whose
// f32 sums run in another order than sgemm's: there, as the GPU test checks the CUDA kernels,
// the result is within the case's f32 tolerance plus one bf16 step of the f32 op's, and carries
// its rounded bits in all but 1% of the elements (a truncating or double rounding store differs
// in about half). The widening reference keeps the strict check (its own test below).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "op_cases.h"
#include "tide/kernels/cpu/gemm_bf16.h"
#include "tide/kernels/ops.h"

using namespace tide;
using namespace tide::testing;

namespace {

// |got - ref| within half an ulp of `dtype` at ref (plus half the smallest f16 subnormal).
void expect_rounded_to_nearest(const std::string& what, const HostTensor& got,
                               const HostTensor& ref, DType dtype) {
  const double half_ulp = dtype == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double floor = dtype == DType::BF16 ? 0.0 : std::ldexp(1.0, -25);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < ref.f.size(); ++i) {
    const double r = ref.f[i], g = got.f[i];
    const bool ok = std::isfinite(r) ? std::fabs(g - r) <= half_ulp * std::fabs(r) + floor
                    : std::isnan(r)  ? std::isnan(g)
                                     : g == r;
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.f.size()
                    << " elements are farther than half an ulp from the f32 result; first at "
                    << first << ": got " << (first >= 0 ? got.f[first] : 0.0f) << ", f32 "
                    << (first >= 0 ? ref.f[first] : 0.0f);
}

// Whether case c in `dtype` runs through the native bf16 GEMM (see the top of the file).
bool native_gemm_case(const OpCase& c, DType dtype) {
  return dtype == DType::BF16 && c.name.rfind("matmul", 0) == 0 &&
         cpu::bf16_gemm_path() != cpu::Bf16GemmPath::kReference;
}

int64_t bits_differing(const HostTensor& a, const HostTensor& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.h.size(); ++i) n += a.h[i] != b.h[i];
  return n;
}

void run_case_in(const OpCase& c, DType dtype) {
  std::vector<HostTensor> narrow = in_dtype(c, dtype).tensors, ref;
  for (const HostTensor& t : narrow)
    ref.push_back(t.dtype == DType::BF16 || t.dtype == DType::F16 ? widened(t) : t);
  c.run(OpContext{}, host_views(ref));
  c.run(OpContext{}, host_views(narrow));
  for (size_t i = 0; i < narrow.size(); ++i) {
    const std::string what = c.name + " " + std::string(dtype_name(dtype)) + " " + narrow[i].name;
    if (narrow[i].dtype == DType::F32 || narrow[i].dtype == DType::I32) {
      expect_bitwise(what, narrow[i], ref[i]);  // statistics and ids: exactly the f32 op's
      continue;
    }
    if (native_gemm_case(c, dtype)) {
      expect_close(what, widened(narrow[i]), ref[i], c.tol + std::ldexp(1.0, -7));
      const auto n = static_cast<int64_t>(narrow[i].h.size());
      EXPECT_LE(bits_differing(narrow[i], narrowed(ref[i], dtype)), std::max<int64_t>(2, n / 100))
          << what << ": of " << n << " elements";
      continue;
    }
    expect_rounded_to_nearest(what, widened(narrow[i]), ref[i], dtype);
    expect_bitwise(what, narrow[i], narrowed(ref[i], dtype));
  }
}

}  // namespace

TEST(OpDtypes, EveryOpCaseTakesBf16Storage) {
  for (const OpCase& c : all_op_cases()) {
    SCOPED_TRACE(c.name);
    run_case_in(c, DType::BF16);
  }
}

// The widening reference itself (the path of CPUs without AMX), held to the strict check.
TEST(OpDtypes, EveryOpCaseTakesBf16StorageOnTheWideningReference) {
  const cpu::Bf16GemmPath saved = cpu::bf16_gemm_path();
  cpu::set_bf16_gemm_path(cpu::Bf16GemmPath::kReference);
  for (const OpCase& c : all_op_cases()) {
    SCOPED_TRACE(c.name);
    run_case_in(c, DType::BF16);
  }
  cpu::set_bf16_gemm_path(saved);
}

TEST(OpDtypes, EveryOpCaseTakesF16Storage) {
  for (const OpCase& c : all_op_cases()) {
    SCOPED_TRACE(c.name);
    run_case_in(c, DType::F16);
  }
}

// Tensors of different dtypes mix in one call (bf16 activations with f32 weights, as a
// mixed-precision step may hold them), and the statistics stay f32.
TEST(OpDtypes, DtypesMixWithinOneCallAndStatisticsStayF32) {
  HostTensor inp = narrowed(randn("inp", {6, 8}, 1), DType::BF16);
  HostTensor weight = randn("weight", {8}, 2), bias = randn("bias", {8}, 3);
  HostTensor out = narrowed(zeros("out", {6, 8}), DType::F16), mean = zeros("mean", {6}),
             rstd = zeros("rstd", {6});
  std::vector<HostTensor> ts = {out, mean, rstd, inp, weight, bias};
  std::vector<Tensor> v = host_views(ts);
  layernorm_forward(OpContext{}, v[0], v[1], v[2], v[3], v[4], v[5]);
  std::vector<HostTensor> ref = {zeros("out", {6, 8}), mean, rstd, widened(inp), weight, bias};
  std::vector<Tensor> r = host_views(ref);
  layernorm_forward(OpContext{}, r[0], r[1], r[2], r[3], r[4], r[5]);
  expect_bitwise("out", ts[0], narrowed(ref[0], DType::F16));
  expect_bitwise("mean", ts[1], ref[1]);
  v[1].dtype = DType::BF16;  // a 16-bit statistic is refused, naming the tensor
  try {
    layernorm_forward(OpContext{}, v[0], v[1], v[2], v[3], v[4], v[5]);
    ADD_FAILURE() << "a bf16 mean was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'mean' has dtype bf16 but f32 is required"),
              std::string::npos)
        << e.what();
  }
}

// On a GPU context the float tensors of one op share one dtype (a CUDA kernel is compiled per
// storage type, cuda/cuda_ops.h): a mix is refused, naming both tensors, before anything
// reaches the GPU (so this runs on machines without one); one 16-bit dtype throughout passes
// the checks and reaches the context check.
TEST(OpDtypes, MixedDtypesOnAGpuContextAreRefused) {
  OpContext gpu;
  gpu.device = Device::cuda(0);
  std::vector<HostTensor> ts = {narrowed(randn("inp", {4, 8}, 1), DType::BF16),
                                zeros("out", {4, 8}),
                                narrowed(zeros("out16", {4, 8}), DType::BF16)};
  std::vector<Tensor> v = host_views(ts);
  for (Tensor& t : v) t.device = gpu.device;  // never dereferenced: the checks come first
  auto message_of = [&](const Tensor& out) {
    try {
      gelu_forward(gpu, out, v[0]);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message_of(v[1]).find("gelu_forward: tensor 'out' is f32 but tensor 'inp' is bf16; "
                                  "on a GPU the float tensors of one op share one dtype"),
            std::string::npos)
      << message_of(v[1]);
  // bf16 in and out: past the dtype checks, stopped by the hand-made context (or the build).
  const std::string same = message_of(v[2]);
  EXPECT_EQ(same.find("share one dtype"), std::string::npos) << same;
  EXPECT_NE(same.find("gelu_forward"), std::string::npos) << same;
}
