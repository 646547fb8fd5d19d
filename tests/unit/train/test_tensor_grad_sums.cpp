// Per-tensor sums of squares of a chunk's gradients (parallel/tensor_grad_sums.h), the one
// function every gradient-norm path uses, on 16-bit gradients: bf16 and f16 widen to f32
// exactly and their squares are exact in double, so the sums equal those of the widened f32
// copy bit for bit, over the whole chunk and over a slice that cuts tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tide/core/rng.h"
#include "tide/model/layout.h"
#include "tide/parallel/tensor_grad_sums.h"

using namespace tide;

TEST(TensorGradSums, SixteenBitGradientsSumAsTheirWidenedCopy) {
  GPTConfig cfg;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 16;
  cfg.vocab_size = 37;
  cfg.max_seq_len = 8;
  ChunkLayout lay = make_layout(cfg);
  lay.pack(1024, 3);  // slices of a third of each chunk: tensors straddle their bounds
  const PhiloxStream rng{21, 0};
  for (DType t : {DType::BF16, DType::F16}) {
    for (int c = 0; c < lay.num_chunks(); ++c) {
      const int64_t n = lay.chunk_elems(c), S = lay.slice_elems(c);
      std::vector<uint16_t> h(static_cast<size_t>(n));
      std::vector<float> f(h.size());
      for (int64_t i = 0; i < n; ++i) {
        const float x =
            static_cast<float>(rng.uint(static_cast<uint64_t>(c * n + i)) % 20001) * 1e-3f - 10.0f;
        h[i] = t == DType::BF16 ? f32_to_bf16(x) : f32_to_f16(x);
        f[i] = t == DType::BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
      }
      // The whole chunk, then rank 1's slice.
      for (const auto [begin, len] : {std::pair<int64_t, int64_t>{0, n}, {S, S}}) {
        std::vector<double> got(lay.num_tensors(), -1), want(lay.num_tensors(), -1);
        tensor_grad_sums(lay, c, Tensor(h.data() + begin, Shape{len}, t), begin, got);
        tensor_grad_sums(lay, c, Tensor(f.data() + begin, Shape{len}), begin, want);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(double)), 0)
            << dtype_name(t) << ", chunk " << c << ", elements from " << begin;
      }
    }
  }
}
