// Model-state memory as the allocators count it, against ZeRO's ideal, and the model running
// with parameters that are resident only while acquired (a placement policy fetching them into
// a budgeted stand-in for device memory).
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <span>

#include "tide/core/rng.h"
#include "tide/model/gpt.h"

using namespace tide;

// Rank N-1 of N allocates its model states for GPT-2 124M's layout; the bytes its allocator
// counts are within 1% of ZeRO's ideal (every kind: psi x bytes per element, divided by N when
// the stage partitions it). The group is a stand-in: no other rank exists, and the allocations
// are never touched, so measuring 124M parameters costs no memory.
TEST(ModelMemory, AllocatedBytesAreWithinOnePercentOfTheIdealForAnyGroupSize) {
  const ChunkLayout base = make_layout(GPTConfig::preset("gpt2-124m"));
  const double psi = static_cast<double>(base.num_params());
  for (DType compute : {DType::F32, DType::BF16})
    for (int64_t target : {int64_t{0}, int64_t{4} << 20})
      for (int N : {1, 2, 3, 8, 64})
        for (int stage = 0; stage <= 3; ++stage) {
          ChunkLayout lay = base;
          lay.pack(target, N);
          HostAllocator counter;
          StoreOptions o;
          o.compute_dtype = compute;
          o.group_rank = N - 1;
          o.sliced_kinds = zero_sliced_kinds(stage);
          o.compute = o.optimizer = &counter;
          ChunkStore store(std::move(lay), o);
          const double p16 = static_cast<double>(dtype_size(compute));
          auto part = [&](ChunkKind k) { return store.sliced(k) ? psi / N : psi; };
          // With f32 compute the master weights are the parameters (no bytes of their own).
          const double master = compute == DType::F32 ? 0.0 : 4.0 * part(ChunkKind::MASTER);
          const double ideal = p16 * (part(ChunkKind::PARAM) + part(ChunkKind::GRAD)) + master +
                               4.0 * (part(ChunkKind::ADAM_M) + part(ChunkKind::ADAM_V));
          const double ratio = static_cast<double>(counter.allocated()) / ideal;
          EXPECT_LE(ratio, 1.01) << dtype_name(compute) << ", target " << target << ", N " << N
                                 << ", stage " << stage;
          EXPECT_GE(ratio, 1.0) << "fewer bytes than the parameters need";
          EXPECT_EQ(counter.allocated(), store.total_bytes());
        }
}

namespace {

GPTConfig small_config() {
  GPTConfig c;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 32;
  c.vocab_size = 53;
  c.max_seq_len = 8;
  c.dropout = 0.1f;
  return c;
}

// Keeps every parameter chunk on the host and copies it into the budgeted "device" only while
// some op uses it (forward and backward only read parameters, so eviction just frees).
struct FetchOnUse : PlacementPolicy {
  FetchOnUse(Allocator& device, const ChunkStore& source) : device(device) {
    for (int c = 0; c < source.layout().num_chunks(); ++c) {
      const Tensor t = source.chunk(ChunkKind::PARAM, c);
      host.emplace_back(t.f32(), t.f32() + t.numel());
    }
  }
  void fetch(ChunkStore& s, int c, Use) override {
    ++fetches;
    s.allocate_chunk(ChunkKind::PARAM, c, device);
    std::memcpy(s.chunk(ChunkKind::PARAM, c).data, host[c].data(), host[c].size() * 4);
    size_t resident = 0;
    for (int k = 0; k < s.layout().num_chunks(); ++k)
      resident += s.resident(ChunkKind::PARAM, k) ? s.layout().chunk_elems(k) * 4 : 0;
    peak_param_bytes = std::max(peak_param_bytes, resident);
  }
  void evict(ChunkStore& s, int c, Use) override { s.free_chunk(ChunkKind::PARAM, c); }
  void on_grads_ready(ChunkStore&, int, int) override {}
  void on_acquire(ChunkStore&, std::span<const int> ids, Use use) override {
    acquired.push_back({std::vector<int>(ids.begin(), ids.end()), use});
  }
  Allocator& device;
  std::vector<std::vector<float>> host;
  std::vector<std::pair<std::vector<int>, Use>> acquired;  // every acquire, in order
  int fetches = 0;
  size_t peak_param_bytes = 0;
};

void fill(MicroBatch& mb) {
  const PhiloxStream rng{3, 4};
  for (int64_t i = 0; i < mb.tokens.numel(); ++i) {
    mb.tokens.i32()[i] = static_cast<int32_t>(rng.uint(2 * i) % 53);
    mb.targets.i32()[i] = static_cast<int32_t>(rng.uint(2 * i + 1) % 53);
  }
  mb.seed = 11;
  mb.step = 2;
}

}  // namespace

// The model acquires one op's parameter group at a time (model/param_groups.h), in the order
// part_groups() gives for each policy, so it runs with a budget of the gradients plus the
// largest group's chunks (a whole block's would not fit), bitwise like the resident model.
TEST(ModelMemory, RunsWithParametersResidentOnlyWhileAcquired) {
  const int64_t target = 4096;  // several chunks
  for (ActivationPolicy policy_kind :
       {ActivationPolicy::SAVE_ALL, ActivationPolicy::SELECTIVE, ActivationPolicy::FULL}) {
    const char* what = activation_policy_name(policy_kind);
    GPT ref(small_config(), policy_kind, target, false);
    ref.init_weights(21);

    const ChunkLayout& lay = ref.store().layout();
    const size_t param_bytes = lay.total_elems() * 4, grad_bytes = param_bytes;
    auto chunk_bytes = [&](const std::vector<int>& ids) {
      return static_cast<size_t>(lay.chunk_elems_of(ids)) * 4;
    };
    // The budget holds the gradients and the chunks of the largest parameter group: the least
    // that can run with one op's parameters resident at a time.
    size_t group_bytes = 0, block_bytes = 0;
    for (const BlockGroups& b : ref.all_block_groups()) {
      for (const std::vector<int>& g : b.groups)
        group_bytes = std::max(group_bytes, chunk_bytes(g));
      block_bytes = std::max(block_bytes, chunk_bytes(b.ids()));
    }
    ASSERT_LT(block_bytes, param_bytes / 2) << "the test model should span many chunks";
    ASSERT_LT(group_bytes, block_bytes) << "a block's chunks should not fit the budget";
    BudgetedAllocator device(grad_bytes + group_bytes);
    ModelOptions o;
    o.chunk_elems = target;
    o.store.with_optimizer = false;
    o.store.params_resident = false;
    o.store.compute = &device;
    GPT gpt(small_config(), policy_kind, o);
    FetchOnUse policy(device, ref.store());
    gpt.store().set_policy(&policy);
    for (int c = 0; c < lay.num_chunks(); ++c)
      EXPECT_FALSE(gpt.store().resident(ChunkKind::PARAM, c));

    auto run = [](GPT& m) {
      auto mb = m.make_micro_batch(2, 8);
      fill(*mb);
      const float loss = m.forward(*mb);
      m.backward(*mb);
      return loss;
    };
    const float want = run(ref), got = run(gpt);
    EXPECT_EQ(std::memcmp(&want, &got, 4), 0) << what << ": " << want << " vs " << got;
    for (int c = 0; c < lay.num_chunks(); ++c) {
      const Tensor a = ref.store().chunk(ChunkKind::GRAD, c),
                   b = gpt.store().chunk(ChunkKind::GRAD, c);
      EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << what << ": gradients of chunk " << c;
      EXPECT_FALSE(gpt.store().resident(ChunkKind::PARAM, c)) << "chunk " << c << " left resident";
    }
    EXPECT_GT(policy.fetches, lay.num_chunks()) << what;  // fetched again for backward
    EXPECT_LE(policy.peak_param_bytes, group_bytes) << what;
    EXPECT_LE(device.peak(), device.limit()) << what;
    // The acquires, in the order the engine's access list and the estimator assume: forward
    // through the blocks, then B and W per block in reverse, each part's groups by part_groups.
    std::vector<std::pair<std::vector<int>, Use>> expected;
    auto part = [&](int i, Use use) {
      const BlockGroups& b = gpt.block_groups(i);
      for (int g : part_groups(b, use, policy_kind)) expected.push_back({b.groups[g], use});
    };
    for (int i = 0; i < gpt.num_blocks(); ++i) part(i, Use::FORWARD);
    for (int i = gpt.num_blocks() - 1; i >= 0; --i) part(i, Use::BACKWARD), part(i, Use::WEIGHT);
    EXPECT_TRUE(policy.acquired == expected)
        << what << ": the model acquired " << policy.acquired.size() << " groups, expected "
        << expected.size();
  }
}

// A stage-1 style store (optimizer states sliced) initialises like the plain one: with f32 the
// parameters are the master weights, whole on every rank.
TEST(ModelMemory, InitialisesTheSameWithSlicedOptimizerStates) {
  GPT plain(small_config(), ActivationPolicy::SAVE_ALL, 4096);
  ModelOptions o;
  o.chunk_elems = 4096;
  o.group_size = 3;
  o.store.group_rank = 2;
  o.store.sliced_kinds = zero_sliced_kinds(1);
  GPT sliced(small_config(), ActivationPolicy::SAVE_ALL, o);
  plain.init_weights(9);
  sliced.init_weights(9);
  for (int id = 0; id < plain.store().layout().num_tensors(); ++id) {
    const Tensor a = plain.store().tensor(ChunkKind::PARAM, id);
    const Tensor b = sliced.store().tensor(ChunkKind::PARAM, id);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << plain.store().layout().slot(id).name;
  }
}

// 16-bit compute: the f32 master weights are the f32 model's parameters bit for bit, and the
// bf16 parameters are them rounded, whole on every rank also when the master is sliced (a
// PARAM left unwritten would start the first step from zeros: validation loss ln V).
TEST(ModelMemory, Bf16ParametersAreTheF32MasterRounded) {
  GPT plain(small_config(), ActivationPolicy::SAVE_ALL, 4096);
  plain.init_weights(9);
  for (bool sliced : {false, true}) {
    ModelOptions o;
    o.chunk_elems = 4096;
    o.store.compute_dtype = DType::BF16;
    if (sliced) {
      o.group_size = 3;
      o.store.group_rank = 2;
      o.store.sliced_kinds = zero_sliced_kinds(1);
    }
    GPT bf16(small_config(), ActivationPolicy::SAVE_ALL, o);
    bf16.init_weights(9);
    const ChunkStore& s = bf16.store();
    for (int id = 0; id < s.layout().num_tensors(); ++id) {
      const std::string& name = s.layout().slot(id).name;
      const float* want = plain.store().tensor(ChunkKind::PARAM, id).f32();
      const Tensor p = s.tensor(ChunkKind::PARAM, id);
      ASSERT_EQ(p.dtype, DType::BF16);
      const auto* bits = static_cast<const uint16_t*>(p.data);
      for (int64_t i = 0; i < p.numel(); ++i)
        ASSERT_EQ(bits[i], f32_to_bf16(want[i])) << name << " [" << i << "], sliced " << sliced;
    }
    // The master: this rank's slice of each chunk (the whole chunk unsliced), f32 exactly.
    int64_t checked = 0;
    for (int id = 0; id < s.layout().num_tensors(); ++id) {
      const TensorSlot& t = s.layout().slot(id);
      const Tensor m = s.slice(ChunkKind::MASTER, t.chunk);
      const int64_t begin = sliced ? 2 * s.layout().slice_elems(t.chunk) : 0;
      const float* want = plain.store().tensor(ChunkKind::PARAM, id).f32();
      for (int64_t i = std::max<int64_t>(0, begin - t.offset);
           i < std::min(t.numel, begin + m.numel() - t.offset); ++i, ++checked)
        ASSERT_EQ(m.f32()[t.offset + i - begin], want[i])
            << "master of " << t.name << " [" << i << "], sliced " << sliced;
    }
    EXPECT_GT(checked, 0);
  }
}
