// The chunk layout (packing, slicing), the allocators (counting, budget), and the chunk store
// (aliasing, sliced kinds, acquire/release with a placement policy, per-micro-batch gradient
// completion).
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

// Records the hooks; fetch allocates the chunk on `device`, evict frees it.
struct RecordingPolicy : PlacementPolicy {
  explicit RecordingPolicy(Allocator& device) : device(device) {}
  void fetch(ChunkStore& s, int c, Use) override {
    fetched.push_back(c);
    s.allocate_chunk(ChunkKind::PARAM, c, device);
  }
  void evict(ChunkStore& s, int c, Use) override {
    evicted.push_back(c);
    if (free_on_evict) s.free_chunk(ChunkKind::PARAM, c);
  }
  void on_grads_ready(ChunkStore& s, int c, int mb) override {
    ready.push_back({c, mb, s.grads_complete(c)});
  }
  Allocator& device;
  bool free_on_evict = true;
  std::vector<int> fetched, evicted;
  std::vector<std::tuple<int, int, bool>> ready;
};
}  // namespace

TEST(ChunkLayout, PacksInOrderWithoutStraddlingAndSizesChunksToTheirPayload) {
  ChunkLayout lay = five_tensors();
  lay.pack(16);  // about 16 elements: [a b c] (15) [d e] (13)
  EXPECT_EQ(lay.num_chunks(), 2);
  EXPECT_EQ(lay.slot(0).chunk, 0);
  EXPECT_EQ(lay.slot(1).offset, 6);
  EXPECT_EQ(lay.slot(2).offset, 11);
  EXPECT_EQ(lay.slot(3).chunk, 1);
  EXPECT_EQ(lay.slot(3).offset, 0);
  EXPECT_EQ(lay.slot(4).offset, 3);
  EXPECT_EQ(lay.payload_elems(0), 15);
  EXPECT_EQ(lay.chunk_elems(0), 16);  // rounded up to 16 elements, not to the target
  EXPECT_EQ(lay.chunk_elems(1), 16);
  EXPECT_EQ(lay.num_params(), 28);
  for (const TensorSlot& s : lay.slots()) EXPECT_LE(s.offset + s.numel, lay.chunk_elems(s.chunk));
}

TEST(ChunkLayout, ATensorLargerThanTheTargetGetsAChunkOfItsOwn) {
  ChunkLayout lay = five_tensors();
  lay.pack(7);  // [a] [b] [c d] [e]: e (10) alone although the target is 7
  EXPECT_EQ(lay.num_chunks(), 4);
  EXPECT_EQ(lay.tensors_in_chunk(2), std::vector<int>({2, 3}));
  EXPECT_EQ(lay.tensors_in_chunk(3), std::vector<int>({4}));
  EXPECT_EQ(lay.max_chunk_elems(), 16);
  EXPECT_THROW(lay.find("zzz"), Error);
}

// Packing units (an op's parameters, model/param_groups.h) stay in one chunk when they fit:
// units [a b] (11) [c d] (7) [e] (10), the last one starting a chunk of its own.
TEST(ChunkLayout, UnitsStayInOneChunkAndTheDefaultTargetIsTheLargestUnit) {
  ChunkLayout lay;
  lay.begin_unit();
  lay.add("a", {2, 3}, true);
  lay.add("b", {5}, false);
  lay.begin_unit();
  lay.add("c", {4}, false);
  lay.add("d", {3}, false);
  lay.begin_unit(/*own_chunk=*/true);
  lay.add("e", {10}, true);
  ChunkLayout automatic = lay;
  automatic.pack(0);  // the target is the largest unit, 11: [a b] [c d] [e]
  EXPECT_EQ(automatic.target_elems(), 11);
  EXPECT_EQ(automatic.num_chunks(), 3);
  EXPECT_EQ(automatic.tensors_in_chunk(1), std::vector<int>({2, 3}));
  ChunkLayout wide = lay;
  wide.pack(20);  // [a b c d] (18) fits; e (28 in all) does not
  EXPECT_EQ(wide.num_chunks(), 2);
  EXPECT_EQ(wide.tensors_in_chunk(0), std::vector<int>({0, 1, 2, 3}));
  ChunkLayout own = lay;
  own.pack(100);  // everything would fit one chunk, but e starts its own
  EXPECT_EQ(own.num_chunks(), 2);
  EXPECT_EQ(own.tensors_in_chunk(1), std::vector<int>({4}));
  ChunkLayout split = lay;
  split.pack(15);  // [a b] then [c d] would not fit with it: per unit [a b] [c d] [e]
  EXPECT_EQ(split.num_chunks(), 3);
  EXPECT_EQ(split.tensors_in_chunk(0), std::vector<int>({0, 1}));
  ChunkLayout small = lay;
  small.pack(8);  // unit [a b] (11) is larger than the target: packed tensor by tensor
  EXPECT_EQ(small.tensors_in_chunk(0), std::vector<int>({0}));
  EXPECT_EQ(small.tensors_in_chunk(1), std::vector<int>({1}));
  EXPECT_EQ(small.tensors_in_chunk(2), std::vector<int>({2, 3}));
}

TEST(ChunkLayout, BufferClassesHalveTheLargestChunkWhileTheChunkFits) {
  ChunkLayout lay;
  for (int64_t n : {100, 40, 20, 5}) lay.add("t" + std::to_string(n), {n}, true);
  lay.pack(1);  // every tensor its own chunk: 112, 48, 32, 16 elements
  ASSERT_EQ(lay.num_chunks(), 4);
  // Classes 112, 56 -> 64, 28 -> 32, 14 -> 16 (rounded up to 16 elements).
  EXPECT_EQ(lay.buffer_elems(0), 112);
  EXPECT_EQ(lay.buffer_elems(1), 64);
  EXPECT_EQ(lay.buffer_elems(2), 32);
  EXPECT_EQ(lay.buffer_elems(3), 16);
  // Over 2 ranks the granule is 32: 112, 56 -> 64, 28 -> 32 (a chunk of 32 elements).
  ChunkLayout two;
  for (int64_t n : {100, 40, 20, 5}) two.add("t" + std::to_string(n), {n}, true);
  two.pack(1, 2);  // 128, 64, 32, 32
  EXPECT_EQ(two.buffer_elems(0), 128);
  EXPECT_EQ(two.buffer_elems(1), 64);
  EXPECT_EQ(two.buffer_elems(2), 32);
  EXPECT_EQ(two.buffer_elems(3), 32);
  for (const ChunkLayout* l : {&lay, &two})
    for (int c = 0; c < l->num_chunks(); ++c) {
      EXPECT_GE(l->buffer_elems(c), l->chunk_elems(c));
      EXPECT_LT(l->buffer_elems(c), 2 * l->chunk_elems(c));
    }
}

TEST(ChunkLayout, EveryChunkSplitsIntoEqualAlignedSlicesAndNoChunkIsPadding) {
  for (int N : {1, 2, 3, 8}) {
    ChunkLayout lay = five_tensors();
    lay.pack(16, N);
    EXPECT_EQ(lay.num_chunks(), 2) << N;  // never padded to a multiple of N chunks
    for (int c = 0; c < lay.num_chunks(); ++c) {
      EXPECT_FALSE(lay.tensors_in_chunk(c).empty());
      EXPECT_EQ(lay.chunk_elems(c) % (16 * N), 0);
      EXPECT_EQ(lay.slice_elems(c) * N, lay.chunk_elems(c));
      EXPECT_EQ(lay.slice_elems(c) % 16, 0);
    }
  }
}

TEST(Allocator, CountsBytesAndEnforcesTheBudget) {
  BudgetedAllocator dev(1 << 20);
  void* a = dev.allocate(512 << 10, "a");
  EXPECT_EQ(dev.allocated(), 512u << 10);
  EXPECT_EQ(static_cast<char*>(a)[1000], 0);  // zero-filled
  try {
    dev.allocate(600 << 10, "param chunk 7");
    FAIL() << "allocation past the budget succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("param chunk 7"), std::string::npos) << e.what();
  }
  dev.free(a, 512 << 10);
  EXPECT_EQ(dev.allocated(), 0u);
  EXPECT_EQ(dev.peak(), 512u << 10);
  EXPECT_EQ(dev.tier(), Tier::COMPUTE);
}

TEST(ChunkStore, F32MasterIsTheParamAndKindsShareTheLayout) {
  ChunkLayout lay = five_tensors();
  lay.pack(16);
  ChunkStore store(std::move(lay));
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

TEST(ChunkStore, SlicedKindsHoldOnlyThisRanksSlice) {
  ChunkLayout lay = five_tensors();
  lay.pack(16, /*group_size=*/2);  // chunks of 32 elements, slices of 16
  StoreOptions o;
  o.group_rank = 1;
  o.sliced_kinds =
      kind_bit(ChunkKind::MASTER) | kind_bit(ChunkKind::ADAM_M) | kind_bit(ChunkKind::ADAM_V);
  ChunkStore store(std::move(lay), o);
  EXPECT_EQ(store.bytes(ChunkKind::PARAM), 2u * 32 * 4);
  EXPECT_EQ(store.bytes(ChunkKind::ADAM_M), 2u * 16 * 4);
  EXPECT_EQ(store.chunk(ChunkKind::ADAM_V, 0).numel(), 16);
  // The f32 master slice is the owned slice of the parameter chunk.
  EXPECT_EQ(store.slice(ChunkKind::MASTER, 1).data, store.slice(ChunkKind::PARAM, 1).data);
  EXPECT_EQ(store.slice(ChunkKind::PARAM, 1).f32(), store.chunk(ChunkKind::PARAM, 1).f32() + 16);
  // A tensor outside the held slice cannot be viewed in a sliced kind.
  EXPECT_THROW(store.tensor(ChunkKind::ADAM_M, 0), Error);
}

// Placed kinds (auto placement's) start unallocated, and each chunk is allocated once where the
// placement puts it: a sliced kind as its own slice, an f32 MASTER as PARAM's bytes.
TEST(ChunkStore, PlacedKindsWaitForTheirTier) {
  ChunkLayout lay = five_tensors();
  lay.pack(16, /*group_size=*/2);  // chunks of 32 elements, slices of 16
  BudgetedAllocator device(1 << 20);
  HostAllocator host;
  StoreOptions o;
  o.group_rank = 1;
  o.sliced_kinds = kind_bit(ChunkKind::ADAM_M);
  o.compute = o.optimizer = &host;
  o.placed_kinds = kind_bit(ChunkKind::PARAM) | kind_bit(ChunkKind::ADAM_M);
  ChunkStore store(std::move(lay), o);
  EXPECT_FALSE(store.resident(ChunkKind::PARAM, 0));
  EXPECT_FALSE(store.resident(ChunkKind::MASTER, 0));  // aliases PARAM, not yet placed
  EXPECT_FALSE(store.resident(ChunkKind::ADAM_M, 1));
  EXPECT_TRUE(store.resident(ChunkKind::GRAD, 0));  // not placed: allocated at once
  EXPECT_EQ(store.chunk_info(ChunkKind::ADAM_M, 1).bytes, 16u * 4);
  EXPECT_EQ(store.total_bytes(), 2 * (2u * 32 * 4));  // GRAD and ADAM_V, whole chunks
  store.place_chunk(ChunkKind::PARAM, 0, device);
  store.place_chunk(ChunkKind::ADAM_M, 1, host);
  EXPECT_EQ(device.allocated(), 32u * 4);
  EXPECT_EQ(store.chunk_info(ChunkKind::PARAM, 0).alloc, &device);
  EXPECT_EQ(store.chunk(ChunkKind::MASTER, 0).data, store.chunk(ChunkKind::PARAM, 0).data);
  EXPECT_EQ(store.chunk(ChunkKind::ADAM_M, 1).numel(), 16);
  EXPECT_EQ(store.chunk(ChunkKind::ADAM_M, 1).f32()[15], 0.0f);        // zero-filled
  EXPECT_THROW(store.place_chunk(ChunkKind::PARAM, 0, host), Error);   // placed already
  EXPECT_THROW(store.place_chunk(ChunkKind::GRAD, 0, device), Error);  // not a placed kind
}

TEST(ChunkStore, AcquireCountsUsersAndFetchesThroughThePolicy) {
  ChunkLayout lay = five_tensors();
  lay.pack(16);
  BudgetedAllocator device(1 << 20);
  StoreOptions o;
  o.with_optimizer = false;
  o.params_resident = false;  // parameters are not resident until acquired
  o.compute = &device;
  ChunkStore store(std::move(lay), o);
  RecordingPolicy policy(device);
  store.set_policy(&policy);
  EXPECT_FALSE(store.resident(ChunkKind::PARAM, 1));
  const std::vector<int> d_and_e = {3, 4};
  store.acquire(d_and_e, Use::FORWARD);
  store.acquire(std::vector<int>{4}, Use::FORWARD);  // a second user of e
  EXPECT_EQ(policy.fetched, std::vector<int>({1}));
  EXPECT_EQ(store.state(4), TensorState::COMPUTE);
  EXPECT_EQ(store.users(4), 2);
  EXPECT_FALSE(store.chunk_movable(1));
  EXPECT_TRUE(store.chunk_movable(0));
  EXPECT_THROW(store.free_chunk(ChunkKind::PARAM, 1), Error);  // ops are using it
  store.release(d_and_e, Use::FORWARD);
  EXPECT_EQ(store.state(3), TensorState::HOLD_AFTER_FWD);
  EXPECT_EQ(store.state(4), TensorState::COMPUTE);  // still one user
  EXPECT_TRUE(policy.evicted.empty());
  store.release(std::vector<int>{4}, Use::FORWARD);
  EXPECT_EQ(policy.evicted, std::vector<int>({1}));
  EXPECT_FALSE(store.resident(ChunkKind::PARAM, 1));
  EXPECT_THROW(store.release(std::vector<int>{4}, Use::FORWARD), Error);
  EXPECT_EQ(device.allocated(), 2u * 16 * 4);  // the two GRAD chunks only
}

TEST(ChunkStore, GradientCompletionIsTrackedPerMicroBatch) {
  ChunkLayout lay = five_tensors();
  lay.pack(16);
  ChunkStore store(std::move(lay));
  HostAllocator unused;
  RecordingPolicy policy(unused);
  store.set_policy(&policy);
  store.begin_step(2);
  store.mark_grad_ready(3, 0);
  EXPECT_TRUE(policy.ready.empty());  // chunk 1 also holds e
  store.mark_grad_ready(4, 0);
  EXPECT_EQ(policy.ready.size(), 1u);
  EXPECT_EQ(policy.ready[0], std::make_tuple(1, 0, false));  // complete for mb 0 only
  EXPECT_EQ(store.state(4), TensorState::HOLD);
  store.mark_grad_ready(4, 1);
  store.mark_grad_ready(3, 1);
  EXPECT_EQ(policy.ready.back(), std::make_tuple(1, 1, true));
  EXPECT_EQ(store.state(3), TensorState::READY_FOR_REDUCE);
  EXPECT_THROW(store.mark_grad_ready(3, 1), Error);  // more contributions than micro-batches
  EXPECT_THROW(store.mark_grad_ready(0, 2), Error);  // no micro-batch 2 in this step
  store.begin_step(1);
  EXPECT_EQ(store.state(3), TensorState::HOLD);
  EXPECT_FALSE(store.grads_complete(1));
}

// move_chunk (PatrickStar's placement primitive): the bytes follow the chunk to the new
// allocator, the old allocation is returned, an f32 master aliasing the parameters follows
// them, and a chunk in use, with a buffer attached, not resident or an alias is refused.
TEST(ChunkStore, MoveChunkCopiesTheBytesAndFreesTheOldAllocation) {
  ChunkLayout lay = five_tensors();
  lay.pack(16, /*group_size=*/2);  // chunks of 32 elements, slices of 16
  HostAllocator host;
  BudgetedAllocator device(1 << 20);
  StoreOptions o;
  o.group_rank = 1;
  o.sliced_kinds = kind_bit(ChunkKind::GRAD) | kind_bit(ChunkKind::MASTER) |
                   kind_bit(ChunkKind::ADAM_M) | kind_bit(ChunkKind::ADAM_V);
  o.compute = o.optimizer = &host;
  ChunkStore store(std::move(lay), o);
  RecordingPolicy policy(device);
  policy.free_on_evict = false;
  store.set_policy(&policy);
  float* p = store.chunk(ChunkKind::PARAM, 1).f32();
  for (int i = 0; i < 32; ++i) p[i] = 0.5f * i;
  store.slice(ChunkKind::ADAM_M, 0).f32()[3] = 7.0f;
  const size_t host_before = host.allocated();

  EXPECT_EQ(store.move_chunk(ChunkKind::PARAM, 1, device), 32u * 4);
  EXPECT_EQ(device.allocated(), 32u * 4);
  EXPECT_EQ(host.allocated(), host_before - 32 * 4);
  EXPECT_EQ(store.chunk_info(ChunkKind::PARAM, 1).alloc, &device);
  const float* moved = store.chunk(ChunkKind::PARAM, 1).f32();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(moved[i], 0.5f * i);
  // The f32 master slice is still the owned slice of the (moved) parameter chunk.
  EXPECT_EQ(store.slice(ChunkKind::MASTER, 1).data, store.slice(ChunkKind::PARAM, 1).data);
  EXPECT_EQ(store.move_chunk(ChunkKind::PARAM, 1, device), 0u);  // already there

  // A sliced kind moves its own slice.
  EXPECT_EQ(store.move_chunk(ChunkKind::ADAM_M, 0, device), 16u * 4);
  EXPECT_EQ(store.slice(ChunkKind::ADAM_M, 0).f32()[3], 7.0f);
  EXPECT_EQ(store.move_chunk(ChunkKind::ADAM_M, 0, host), 16u * 4);
  EXPECT_EQ(store.slice(ChunkKind::ADAM_M, 0).f32()[3], 7.0f);
  EXPECT_EQ(device.allocated(), 32u * 4);

  // Refusals, each naming why.
  auto error_of = [&](auto f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of([&] { store.move_chunk(ChunkKind::MASTER, 1, host); }).find("aliases"),
            std::string::npos);
  std::vector<float> buffer(32);
  store.attach_whole(ChunkKind::GRAD, 1, buffer.data());
  EXPECT_NE(error_of([&] { store.move_chunk(ChunkKind::GRAD, 1, device); }).find("attached"),
            std::string::npos);
  store.detach_whole(ChunkKind::GRAD, 1);
  const int ids[] = {4};  // tensor e, in chunk 1
  store.acquire(ids, Use::FORWARD);
  EXPECT_NE(error_of([&] { store.move_chunk(ChunkKind::PARAM, 1, host); }).find("ops are using"),
            std::string::npos);
  store.release(ids, Use::FORWARD);
  EXPECT_EQ(store.move_chunk(ChunkKind::PARAM, 1, host), 32u * 4);
  EXPECT_EQ(device.allocated(), 0u);
  store.free_chunk(ChunkKind::GRAD, 0);
  EXPECT_NE(error_of([&] { store.move_chunk(ChunkKind::GRAD, 0, device); }).find("not resident"),
            std::string::npos);
  EXPECT_EQ(device.allocated(), 0u) << "a refused move left memory allocated";

  // move_chunk_into: into the caller's memory, leaving the old memory to the caller.
  void* target = device.allocate(16 * 4, "a cached block");
  void* home = store.slice(ChunkKind::ADAM_M, 0).data;
  const size_t host_now = host.allocated();
  EXPECT_EQ(store.move_chunk_into(ChunkKind::ADAM_M, 0, target, device), home);
  EXPECT_EQ(store.slice(ChunkKind::ADAM_M, 0).data, target);
  EXPECT_EQ(store.slice(ChunkKind::ADAM_M, 0).f32()[3], 7.0f);
  EXPECT_EQ(host.allocated(), host_now);  // not freed: the caller's
  EXPECT_EQ(static_cast<float*>(home)[3], 7.0f);
  EXPECT_EQ(store.move_chunk_into(ChunkKind::ADAM_M, 0, home, host), target);  // back home
  device.free(target, 16 * 4);
}
