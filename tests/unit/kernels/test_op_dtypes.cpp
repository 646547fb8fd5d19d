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
#include <functional>
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

// Case c (a case in_dtype, or a mix of 16-bit training) against its call in f32 on the same
// values.
void run_case(const OpCase& c, DType dtype) {
  // The fused residual + layernorm is the two ops, each rounding what it writes: in 16 bits the
  // layernorm reads the rounded residual, so its output is not one rounding of the f32 op's.
  // LayerNorm.ResidualLayernormHasTheBitsOfTheTwoOps holds it to the two 16-bit ops instead.
  if (c.name.starts_with("residual_layernorm_forward")) return;
  std::vector<HostTensor> narrow = c.tensors, ref;
  for (const HostTensor& t : narrow)
    ref.push_back(t.dtype == DType::BF16 || t.dtype == DType::F16 ? widened(t) : t);
  c.run(OpContext{}, host_views(ref));
  c.run(OpContext{}, host_views(narrow));
  for (size_t i = 0; i < narrow.size(); ++i) {
    const std::string what = c.name + " " + narrow[i].name;
    if (narrow[i].dtype == DType::F32 || narrow[i].dtype == DType::I32) {
      // Statistics, ids and a mix's f32 tensors: exactly the f32 op's (the native GEMM's f32
      // sums in its own order: within the case's tolerance).
      if (native_gemm_case(c, dtype))
        expect_close(what, narrow[i], ref[i], c.tol);
      else
        expect_bitwise(what, narrow[i], ref[i]);
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
    run_case(in_dtype(c, DType::BF16), DType::BF16);
  }
}

// The widening reference itself (the path of CPUs without AMX), held to the strict check.
TEST(OpDtypes, EveryOpCaseTakesBf16StorageOnTheWideningReference) {
  const cpu::Bf16GemmPath saved = cpu::bf16_gemm_path();
  cpu::set_bf16_gemm_path(cpu::Bf16GemmPath::kReference);
  for (const OpCase& c : all_op_cases()) {
    SCOPED_TRACE(c.name);
    run_case(in_dtype(c, DType::BF16), DType::BF16);
  }
  cpu::set_bf16_gemm_path(saved);
}

TEST(OpDtypes, EveryOpCaseTakesF16Storage) {
  for (const OpCase& c : all_op_cases()) {
    SCOPED_TRACE(c.name);
    run_case(in_dtype(c, DType::F16), DType::F16);
  }
}

// The mixes of 16-bit training (f32 logits and their gradient, f32 parameter gradients beside
// 16-bit operands; mixed_dtype_cases): 16-bit results rounded once from the f32 op's, f32 ones
// exactly the f32 op's.
TEST(OpDtypes, MixesOf16BitTrainingEqualTheF32Op) {
  for (DType dtype : {DType::BF16, DType::F16}) {
    const std::vector<OpCase> mixed = mixed_dtype_cases(dtype);
    EXPECT_EQ(mixed.size(), 36u);  // every case of the six ops, once per mix
    for (const OpCase& m : mixed) {
      SCOPED_TRACE(m.name);
      run_case(m, dtype);
    }
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

// On a device context the operands of one op share one dtype (a CUDA kernel is compiled per
// storage type, cuda/cuda_ops.h; the simulated device keeps the rule so that CI meets what a
// GPU would refuse): a mix is refused, naming both tensors, before anything reaches the device
// (so this runs on machines without a GPU); one 16-bit dtype throughout, or a tensor that keeps
// its own dtype (a matmul's f32 output), passes the checks and reaches the context check.
TEST(OpDtypes, MixedDtypesOnADeviceContextAreRefused) {
  for (const Device device : {Device::cuda(0), Device::sim(0)}) {
    SCOPED_TRACE(device.str());
    OpContext ctx;
    ctx.device = device;  // no stream: the checks come first, the context check after them
    std::vector<HostTensor> ts = {narrowed(randn("inp", {4, 8}, 1), DType::BF16),
                                  zeros("out", {4, 8}),
                                  narrowed(zeros("out16", {4, 8}), DType::BF16),
                                  narrowed(randn("weight", {8, 8}, 2), DType::BF16)};
    std::vector<Tensor> v = host_views(ts);
    for (Tensor& t : v) t.device = device;  // never dereferenced
    auto message_of = [&](const std::function<void()>& op) {
      try {
        op();
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("(accepted)");
    };
    const std::string mixed = message_of([&] { gelu_forward(ctx, v[1], v[0]); });
    EXPECT_NE(mixed.find("gelu_forward: tensor 'out' is f32 but tensor 'inp' is bf16; on a "
                         "device the operands of one op share one dtype"),
              std::string::npos)
        << mixed;
    // bf16 in and out: past the dtype checks, stopped by the hand-made context (or the build).
    for (const std::string& passed :
         {message_of([&] { gelu_forward(ctx, v[2], v[0]); }),
          message_of([&] { matmul_forward(ctx, v[1], v[0], v[3], Tensor()); })}) {
      EXPECT_EQ(passed.find("share one dtype"), std::string::npos) << passed;
      EXPECT_NE(passed.find("_forward"), std::string::npos) << passed;
    }
  }
}
