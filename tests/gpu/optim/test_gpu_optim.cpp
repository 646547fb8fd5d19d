// The CUDA fused AdamW against the CPU reference: bitwise equal for every gradient dtype and
// parameter-copy dtype, odd sizes and unaligned chunks; a non-finite gradient flagged on the
// device makes the update write nothing.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "tide/core/device.h"
#include "tide/core/dtype.h"
#include "tide/core/rng.h"
#include "tide/optim/adamw.h"
#include "tide/optim/adamw_cuda.h"

using namespace tide;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible: this test needs one"

template <typename T>
struct DeviceArray {
  explicit DeviceArray(const std::vector<T>& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(&p, (n + 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(p); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  size_t n;
  T* p = nullptr;
};

struct HostState {
  explicit HostState(int64_t n, uint64_t seed) : master(n), grad(n), m(n), v(n) {
    PhiloxStream r{seed, 3};
    for (int64_t i = 0; i < n; ++i) {
      master[i] = r.normal(4 * i);
      grad[i] = 0.01f * r.normal(4 * i + 1);
      m[i] = 0.1f * r.normal(4 * i + 2);
      const float x = 0.1f * r.normal(4 * i + 3);
      v[i] = x * x;
    }
  }
  std::vector<float> master, grad, m, v;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, size_t offset = 0) {
  for (size_t i = 0; i < b.size(); ++i)
    if (f32_bits(a[i + offset]) != f32_bits(b[i])) return false;
  return true;
}

const AdamWHyper kHyper{1e-3, 0.9, 0.95, 1e-8, 0.1};

}  // namespace

TEST(AdamWCuda, BitwiseEqualToReferenceForAllDtypes) {
  SKIP_WITHOUT_GPU();
  for (DType gd : {DType::F32, DType::BF16, DType::F16})
    for (DType od : {DType::U16, DType::F32, DType::BF16, DType::F16})  // U16: no param copy
      for (int64_t n : {1, 3, 4, 5, 1023, 1 << 20}) {
        HostState ref(n, 100 + n);
        std::vector<uint16_t> g16(n);
        for (int64_t i = 0; i < n; ++i) {
          if (gd == DType::BF16)
            g16[i] = f32_to_bf16(ref.grad[i]), ref.grad[i] = bf16_to_f32(g16[i]);
          if (gd == DType::F16) g16[i] = f32_to_f16(ref.grad[i]), ref.grad[i] = f16_to_f32(g16[i]);
        }
        DeviceArray<float> master(ref.master), g32(ref.grad), m(ref.m), v(ref.v),
            out32(std::vector<float>(n, 0.0f));
        DeviceArray<uint16_t> dg16(g16), out16(std::vector<uint16_t>(n, 0));
        AdamWChunk c{master.p, gd == DType::F32 ? (void*)g32.p : dg16.p, gd, m.p, v.p, nullptr, od,
                     n};
        if (od == DType::F32) c.param_out = out32.p;
        if (od == DType::BF16 || od == DType::F16) c.param_out = out16.p;
        for (int64_t t = 1; t <= 3; ++t) {
          const AdamWStep s{t, t == 2 ? 0.5f : 1.0f};
          adamw_reference(ref.master.data(), ref.grad.data(), ref.m.data(), ref.v.data(), n, kHyper,
                          s);
          adamw_cuda(c, kHyper, s, nullptr, nullptr);
        }
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto got = master.download();
        EXPECT_TRUE(same_bits(got, ref.master)) << dtype_name(gd) << " n=" << n;
        EXPECT_TRUE(same_bits(m.download(), ref.m)) << dtype_name(gd) << " n=" << n;
        EXPECT_TRUE(same_bits(v.download(), ref.v)) << dtype_name(gd) << " n=" << n;
        const auto o32 = out32.download();
        const auto o16 = out16.download();
        for (int64_t i = 0; i < n; ++i) {
          if (od == DType::F32) ASSERT_EQ(f32_bits(o32[i]), f32_bits(got[i])) << i;
          if (od == DType::BF16) ASSERT_EQ(o16[i], f32_to_bf16(got[i])) << i;
          if (od == DType::F16) ASSERT_EQ(o16[i], f32_to_f16(got[i])) << i;
        }
      }
}

// Classic Adam with L2 (DeepSpeed's Adam with adam_w_mode false): the kernel's L2 term rounds
// as the reference's does.
TEST(AdamWCuda, ClassicAdamBitwiseEqualToReference) {
  SKIP_WITHOUT_GPU();
  const AdamWHyper h{1e-3, 0.9, 0.95, 1e-8, 0.1, /*decoupled=*/false};
  for (int64_t n : {1, 5, 1023, 1 << 20}) {
    HostState ref(n, 200 + n);
    DeviceArray<float> master(ref.master), g(ref.grad), m(ref.m), v(ref.v);
    const AdamWChunk c{master.p, g.p, DType::F32, m.p, v.p, nullptr, DType::BF16, n};
    for (int64_t t = 1; t <= 3; ++t) {
      const AdamWStep s{t, t == 2 ? 0.5f : 1.0f};
      adamw_reference(ref.master.data(), ref.grad.data(), ref.m.data(), ref.v.data(), n, h, s);
      adamw_cuda(c, h, s, nullptr, nullptr);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(same_bits(master.download(), ref.master)) << "n=" << n;
    EXPECT_TRUE(same_bits(m.download(), ref.m)) << "n=" << n;
    EXPECT_TRUE(same_bits(v.download(), ref.v)) << "n=" << n;
  }
}

TEST(AdamWCuda, UnalignedChunkTakesTheScalarPathWithTheSameBits) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 10001;
  HostState ref(n + 1, 7);
  DeviceArray<float> master(ref.master), g(ref.grad), m(ref.m), v(ref.v);
  adamw_reference(ref.master.data() + 1, ref.grad.data() + 1, ref.m.data() + 1, ref.v.data() + 1, n,
                  kHyper, {5});
  adamw_cuda({master.p + 1, g.p + 1, DType::F32, m.p + 1, v.p + 1, nullptr, DType::BF16, n}, kHyper,
             {5}, nullptr, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(same_bits(master.download(), ref.master));
}

TEST(AdamWCuda, NonFiniteGradientFlagSkipsTheUpdate) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 100000;
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    HostState st(n, 9);
    st.grad[n - 7] = bad;
    std::vector<uint16_t> h16(n, 0x3c00);
    h16[12345] = f32_to_f16(bad);
    DeviceArray<float> master(st.master), g(st.grad), m(st.m), v(st.v);
    DeviceArray<uint16_t> g16(h16);
    DeviceArray<int> flag(std::vector<int>{0});
    // A finite buffer leaves the flag clear.
    DeviceArray<float> clean(std::vector<float>(1000, 1.0f));
    grad_nonfinite_cuda(clean.p, DType::F32, 1000, flag.p, nullptr);
    ASSERT_EQ(flag.download()[0], 0);
    grad_nonfinite_cuda(g16.p, DType::F16, n, flag.p, nullptr);
    ASSERT_EQ(flag.download()[0], 1);
    grad_nonfinite_cuda(g.p, DType::F32, n, flag.p, nullptr);
    adamw_cuda({master.p, g.p, DType::F32, m.p, v.p, nullptr, DType::BF16, n}, kHyper, {1}, flag.p,
               nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(flag.download()[0], 1);
    EXPECT_TRUE(same_bits(master.download(), st.master));
    EXPECT_TRUE(same_bits(m.download(), st.m));
    EXPECT_TRUE(same_bits(v.download(), st.v));
  }
}
