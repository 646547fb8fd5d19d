// Deferred W: backward_weight of a (micro-batch, block) may run any time after its
// backward_input, past other B and W parts of this and other micro-batches (zero-bubble
// schedules). Whatever the order, the gradients must be bitwise those of the fused run
// (B then W per block, one micro-batch after another), for every activation policy, with
// dropout, and with 1 to 4 micro-batches in flight — as long as each parameter receives its
// W contributions in micro-batch order (float addition is not associative). The tied wte is
// written by two blocks (head and embedding), so W(embedding, m) must precede W(head, m+1):
// the engine runs W a micro-batch at a time, which guarantees it.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "test_batches.h"
#include "tide/model/gpt.h"

using namespace tide;

namespace {

GPTConfig config() {
  GPTConfig c;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 41;
  c.max_seq_len = 8;
  c.dropout = 0.1f;
  return c;
}

constexpr int kB = 2, kT = 8;

std::vector<float> grads(GPT& gpt) {
  std::vector<float> g;
  for (int c = 0; c < gpt.store().layout().num_chunks(); ++c) {
    const Tensor t = gpt.store().chunk(ChunkKind::GRAD, c);
    g.insert(g.end(), t.f32(), t.f32() + t.numel());
  }
  return g;
}

// One part of the backward pass of micro-batch mb through block i.
struct Part {
  bool weight;  // W (true) or B (false)
  int mb, block;
};

// Runs the forward of M micro-batches, then the backward parts in `order`, and returns the
// gradients. Also checks the stash pool held at most `slots` stashes.
std::vector<float> run(ActivationPolicy policy, int M, const std::vector<Part>& order, int slots) {
  GPT gpt(config(), policy, /*chunk_elems=*/0, /*with_optimizer=*/false);
  gpt.init_weights(17);
  StashPool pool(gpt.stash_slot_bytes(kB, kT), slots);
  std::vector<std::unique_ptr<MicroBatch>> mbs;
  for (int m = 0; m < M; ++m) {
    mbs.push_back(gpt.make_micro_batch(kB, kT, &pool));
    test::fill_test_batch(*mbs[m], m);
    gpt.forward(*mbs[m]);
  }
  gpt.store().begin_step(M);
  for (const Part& p : order) {
    if (p.weight)
      gpt.backward_weight_block(*mbs[p.mb], p.block, /*mark_grads=*/true);
    else
      gpt.backward_input_block(*mbs[p.mb], p.block);
  }
  EXPECT_EQ(pool.in_use(), 0);
  for (int c = 0; c < gpt.store().layout().num_chunks(); ++c)
    EXPECT_TRUE(gpt.store().grads_complete(c)) << "chunk " << c;
  return grads(gpt);
}

// The reference: forward, then B and W per block, one micro-batch at a time.
std::vector<float> fused(ActivationPolicy policy, int M) {
  GPT gpt(config(), policy, 0, false);
  gpt.init_weights(17);
  auto mb = gpt.make_micro_batch(kB, kT);
  for (int m = 0; m < M; ++m) {
    test::fill_test_batch(*mb, m);
    gpt.forward(*mb);
    gpt.backward(*mb);
  }
  return grads(gpt);
}

const int kBlocks = config().n_layer + 2;

// All B of every micro-batch, then all W, a micro-batch at a time.
std::vector<Part> all_b_then_all_w(int M) {
  std::vector<Part> o;
  for (int m = 0; m < M; ++m)
    for (int i = kBlocks - 1; i >= 0; --i) o.push_back({false, m, i});
  for (int m = 0; m < M; ++m)
    for (int i = kBlocks - 1; i >= 0; --i) o.push_back({true, m, i});
  return o;
}

// The B of micro-batch m+1 interleaved with the W of micro-batch m, block by block (as ZB-H1
// fills bubbles), W lagging one block behind B within a micro-batch.
std::vector<Part> interleaved(int M) {
  std::vector<Part> o;
  for (int m = 0; m < M; ++m) {
    for (int i = kBlocks - 1; i >= 0; --i) {
      o.push_back({false, m, i});
      if (m > 0) o.push_back({true, m - 1, i});  // the previous micro-batch's deferred W
      if (i + 1 < kBlocks) o.push_back({true, m, i + 1});
    }
    o.push_back({true, m, 0});
  }
  // W(m, i+1) is pushed both lagging B(m) and again while B(m+1) runs: keep the first.
  std::vector<Part> unique;
  std::vector<std::vector<bool>> seen(M, std::vector<bool>(kBlocks, false));
  for (const Part& p : o) {
    if (p.weight) {
      if (seen[p.mb][p.block]) continue;
      seen[p.mb][p.block] = true;
    }
    unique.push_back(p);
  }
  return unique;
}

// Block-major B (every micro-batch through block i before block i-1), then W a micro-batch
// at a time.
std::vector<Part> block_major(int M) {
  std::vector<Part> o;
  for (int i = kBlocks - 1; i >= 0; --i)
    for (int m = 0; m < M; ++m) o.push_back({false, m, i});
  for (int m = 0; m < M; ++m)
    for (int i = kBlocks - 1; i >= 0; --i) o.push_back({true, m, i});
  return o;
}

// The most stashes in flight at once in `order`.
int peak_stashes(const std::vector<Part>& order) {
  int n = 0, peak = 0;
  for (const Part& p : order) peak = std::max(peak, n += p.weight ? -1 : 1);
  return peak;
}

}  // namespace

TEST(DeferredW, AnyOrderGivesTheFusedGradientsBitwise) {
  const std::vector<std::pair<const char*, std::function<std::vector<Part>(int)>>> orders = {
      {"all B then all W", all_b_then_all_w},
      {"interleaved", interleaved},
      {"block-major", block_major}};
  for (ActivationPolicy policy :
       {ActivationPolicy::SAVE_ALL, ActivationPolicy::SELECTIVE, ActivationPolicy::FULL}) {
    for (int M = 1; M <= 4; ++M) {
      const std::vector<float> ref = fused(policy, M);
      for (const auto& [name, make] : orders) {
        const std::vector<Part> order = make(M);
        ASSERT_EQ(order.size(), size_t(2 * M * kBlocks)) << name;
        // The pool holds exactly the stashes in flight: the sum, not one workspace.
        const std::vector<float> g = run(policy, M, order, peak_stashes(order));
        ASSERT_EQ(g.size(), ref.size());
        EXPECT_EQ(std::memcmp(g.data(), ref.data(), g.size() * sizeof(float)), 0)
            << activation_policy_name(policy) << ", " << M << " micro-batch(es), " << name;
      }
    }
  }
}

TEST(DeferredW, ThePoolIsSizedByTheStashesInFlight) {
  // All B then all W of 2 micro-batches holds 2 x blocks stashes; one slot fewer is a clear
  // error, not a silent overwrite.
  const std::vector<Part> order = all_b_then_all_w(2);
  EXPECT_EQ(peak_stashes(order), 2 * kBlocks);
  try {
    run(ActivationPolicy::SELECTIVE, 2, order, 2 * kBlocks - 1);
    FAIL() << "an undersized stash pool was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stash"), std::string::npos) << e.what();
  }
}

TEST(DeferredW, OutOfOrderPartsAreClearErrors) {
  GPT gpt(config(), ActivationPolicy::SAVE_ALL, 0, false);
  gpt.init_weights(1);
  auto mb = gpt.make_micro_batch(kB, kT);
  test::fill_test_batch(*mb, 0);
  gpt.forward(*mb);
  EXPECT_THROW(gpt.backward_weight_block(*mb, 2, false), Error);  // W before its B
  gpt.backward_input_block(*mb, kBlocks - 1);
  EXPECT_THROW(gpt.backward_input_block(*mb, kBlocks - 1), Error);  // B twice
  EXPECT_THROW(gpt.forward(*mb), Error);  // a new forward while a W is pending
}
