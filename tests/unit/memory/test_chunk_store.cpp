// The chunk layout (packing, padding, ownership) and the chunk store (aliasing, tensor states,
// gradient completion).
#include <gtest/gtest.h>

#include <cstring>

#include "tide/memory/chunk_store.h"

using namespace tide;

namespace {
// Tensors of 6, 5, 4, 3 and 10 elements.
ChunkLayout five_tensors() {
  ChunkLayout lay;
  lay.add("a", {2, 3}, true);
  lay.add("b", {5}, false);
  lay.add("c", {4}, false);
  lay.add("d", {3}, false);
  lay.add("e", {10}, true);
  return lay;
}
}  // namespace

TEST(ChunkLayout, PacksInOrderWithoutStraddling) {
  ChunkLayout lay = five_tensors();
  lay.pack(16);  // 16 elements per chunk: [a b c] [d e] (c would not fit after d, e in chunk 1)
  EXPECT_EQ(lay.chunk_elems(), 16);
  EXPECT_EQ(lay.num_chunks(), 2);
  EXPECT_EQ(lay.slot(0).chunk, 0);
  EXPECT_EQ(lay.slot(1).offset, 6);
  EXPECT_EQ(lay.slot(2).offset, 11);
  EXPECT_EQ(lay.slot(3).chunk, 1);
  EXPECT_EQ(lay.slot(3).offset, 0);
  EXPECT_EQ(lay.slot(4).offset, 3);
  EXPECT_EQ(lay.payload_elems(0), 15);
  EXPECT_EQ(lay.num_params(), 28);
  for (const TensorSlot& s : lay.slots()) EXPECT_LE(s.offset + s.numel, lay.chunk_elems());
}

TEST(ChunkLayout, ChunkHoldsTheLargestTensorAndGroupsPadTheCount) {
  ChunkLayout lay = five_tensors();
  lay.pack(4, /*group_size=*/3);  // raised to 10, rounded to 16; 2 chunks padded to 3
  EXPECT_EQ(lay.chunk_elems(), 16);
  EXPECT_EQ(lay.num_chunks(), 3);
  EXPECT_TRUE(lay.tensors_in_chunk(2).empty());
  EXPECT_EQ(lay.owner_of_chunk(2), 2);
  EXPECT_EQ(lay.owner_of_chunk(1), 1);
  EXPECT_THROW(lay.find("zzz"), Error);
}

TEST(ChunkStore, F32MasterIsTheParamAndKindsShareTheLayout) {
  ChunkLayout lay = five_tensors();
  lay.pack(16);
  ChunkStore store(std::move(lay), DType::F32);
  EXPECT_EQ(store.tensor(ChunkKind::MASTER, 4).data, store.tensor(ChunkKind::PARAM, 4).data);
  EXPECT_NE(store.tensor(ChunkKind::ADAM_M, 4).data, store.tensor(ChunkKind::PARAM, 4).data);
  EXPECT_EQ(store.tensor(ChunkKind::GRAD, 0).shape, (Shape{2, 3}));
  // 2 chunks x 16 floats for PARAM, GRAD, ADAM_M, ADAM_V; MASTER aliases PARAM.
  EXPECT_EQ(store.total_bytes(), 4u * 2 * 16 * 4);
  EXPECT_EQ(store.bytes(ChunkKind::MASTER), 0u);
  // Tensor views land at their offsets inside the chunk.
  EXPECT_EQ(static_cast<float*>(store.tensor(ChunkKind::GRAD, 4).data),
            store.chunk(ChunkKind::GRAD, 1).f32() + 3);
}

TEST(ChunkStore, StatesAndGradientCompletion) {
  ChunkLayout lay = five_tensors();
  lay.pack(16);
  ChunkStore store(std::move(lay), DType::F32, /*with_optimizer=*/false);
  EXPECT_FALSE(store.has(ChunkKind::ADAM_M));
  store.set_state(3, TensorState::COMPUTE);
  EXPECT_FALSE(store.chunk_movable(1));
  EXPECT_TRUE(store.chunk_movable(0));
  // A tensor an op is using cannot be freed.
  EXPECT_THROW(store.set_state(3, TensorState::FREE), Error);
  store.set_state(3, TensorState::HOLD_AFTER_BWD);
  EXPECT_TRUE(store.chunk_movable(1));

  std::vector<int> ready;
  store.on_chunk_grads_ready = [&](int c) { ready.push_back(c); };
  store.mark_grad_ready(3);
  EXPECT_TRUE(ready.empty());  // chunk 1 also holds e
  store.mark_grad_ready(4);
  store.mark_grad_ready(0);
  store.mark_grad_ready(1);
  EXPECT_EQ(ready, std::vector<int>({1}));
  store.mark_grad_ready(2);
  EXPECT_EQ(ready, std::vector<int>({1, 0}));
  store.begin_step();
  EXPECT_EQ(store.state(3), TensorState::HOLD);
}
