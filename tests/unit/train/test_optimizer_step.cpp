// AdamW over a chunk store (parallel/optimizer_step.h) in 16-bit compute: the gradients are read
// in the store's dtype, the f32 master is updated, and the compute-precision PARAM is written in
// the same pass. Oracle: adamw_reference on the f32 master with the gradients widened (bf16 and
// f16 widen exactly), per tensor with its own weight decay; PARAM must be the master rounded to
// nearest even, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tide/core/rng.h"
#include "tide/model/layout.h"
#include "tide/parallel/optimizer_step.h"

using namespace tide;

namespace {

GPTConfig step_model() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 37;
  c.max_seq_len = 8;
  return c;
}

float widen16(const void* p, DType t, int64_t i) {
  const auto* h = static_cast<const uint16_t*>(p);
  return t == DType::BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
}

uint16_t narrow16(float x, DType t) {
  return t == DType::BF16 ? f32_to_bf16(x) : f32_to_f16(x);
}

}  // namespace

TEST(OptimizerStep, SixteenBitStoreUpdatesTheMasterAndWritesTheParametersInOnePass) {
  for (DType t : {DType::BF16, DType::F16}) {
    ChunkLayout lay = make_layout(step_model());
    lay.pack(1024);  // several chunks, tensors across their bounds
    StoreOptions so;
    so.compute_dtype = t;
    ChunkStore store(lay, so);
    ASSERT_EQ(store.chunk(ChunkKind::MASTER, 0).dtype, DType::F32);
    ASSERT_EQ(store.chunk(ChunkKind::GRAD, 0).dtype, t);
    // Master weights, their 16-bit copy, gradients and Adam's state, from a fixed stream.
    const PhiloxStream rng{9, static_cast<uint64_t>(t)};
    uint64_t k = 0;
    auto uniform = [&](float lo, float hi) {
      return lo + (hi - lo) * static_cast<float>(rng.uint(k++) % 100001) / 100000.0f;
    };
    for (int c = 0; c < lay.num_chunks(); ++c) {
      const Tensor master = store.chunk(ChunkKind::MASTER, c);
      auto* param = static_cast<uint16_t*>(store.chunk(ChunkKind::PARAM, c).data);
      auto* grad = static_cast<uint16_t*>(store.chunk(ChunkKind::GRAD, c).data);
      for (int64_t i = 0; i < master.numel(); ++i) {
        master.f32()[i] = uniform(-1, 1);
        param[i] = narrow16(master.f32()[i], t);
        grad[i] = narrow16(uniform(-0.5f, 0.5f), t);
        store.chunk(ChunkKind::ADAM_M, c).f32()[i] = uniform(-0.01f, 0.01f);
        store.chunk(ChunkKind::ADAM_V, c).f32()[i] = uniform(0, 1e-3f);
      }
    }
    // The oracle's copies, per tensor.
    AdamWHyper h;
    h.lr = 1e-2;
    h.weight_decay = 0.1;
    const AdamWStep step{3, 0.5f};
    std::vector<std::vector<float>> want(lay.num_tensors());
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const TensorSlot& s = lay.slot(id);
      const Tensor master = store.tensor(ChunkKind::MASTER, id);
      const Tensor grad = store.tensor(ChunkKind::GRAD, id);
      std::vector<float> w(master.f32(), master.f32() + s.numel), g(s.numel);
      for (int64_t i = 0; i < s.numel; ++i) g[i] = widen16(grad.data, t, i);
      std::vector<float> m(store.tensor(ChunkKind::ADAM_M, id).f32(),
                           store.tensor(ChunkKind::ADAM_M, id).f32() + s.numel);
      std::vector<float> v(store.tensor(ChunkKind::ADAM_V, id).f32(),
                           store.tensor(ChunkKind::ADAM_V, id).f32() + s.numel);
      AdamWHyper th = h;
      if (!s.decay) th.weight_decay = 0;
      adamw_reference(w.data(), g.data(), m.data(), v.data(), s.numel, th, step);
      want[id] = w;
    }
    adamw_step(OpContext{}, store, h, step);
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const TensorSlot& s = lay.slot(id);
      const float* master = store.tensor(ChunkKind::MASTER, id).f32();
      const auto* param = static_cast<const uint16_t*>(store.tensor(ChunkKind::PARAM, id).data);
      EXPECT_EQ(std::memcmp(master, want[id].data(), s.numel * sizeof(float)), 0)
          << dtype_name(t) << ", " << s.name << ": master";
      int64_t wrong = 0;
      for (int64_t i = 0; i < s.numel; ++i) wrong += param[i] != narrow16(master[i], t);
      EXPECT_EQ(wrong, 0) << dtype_name(t) << ", " << s.name
                          << ": the parameters are not the master rounded to nearest even";
    }
  }
}
