// bf16 and fp16 (issue #26) with the memory options that only move or recompute what a step
// holds: the selective and full activation policies, ZeRO-Offload (its CPU Adam, DPU off),
// offload_param and placement.policy=auto each train the plain 16-bit run's model bit for bit on
// one rank (losses, gradient norms, validation, master weights), dropout 0.1. A recomputation
// repeats the same ops in the same order, offload's CPU Adam is the same update as the one on
// the store, and placement only moves bytes, so nothing here is a matter of tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "test_files.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

using namespace tide;

namespace {

std::string sixteen_bit_data() {
  const std::string dir = test::temp_dir("sixteen_bit_options");
  std::vector<uint16_t> tokens(4000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint16_t>(i % 5 == 0 ? i * 31 % 50 : i % 13 * 3 % 50);
  write_token_shard(dir + "/train.bin", std::span<const uint16_t>(tokens));
  return dir;
}

std::vector<std::string> sixteen_bit_run(const std::string& dir, const std::string& half,
                                         const std::string& out) {
  return {"data.train=" + dir + "/train.bin",
          "data.val=" + dir + "/train.bin",
          "model.vocab_size=50",
          "model.n_layer=2",
          "model.n_head=2",
          "model.n_embd=16",
          "model.dropout=0.1",
          "seq_len=8",
          "train_micro_batch_size_per_gpu=4",
          "gradient_accumulation_steps=2",
          "optimizer.params.lr=1e-2",
          "eval.sequences=8",
          "log.progress=false",
          half + ".enabled=true",
          "out_dir=" + dir + "/" + out};
}

// Losses, gradient norms and the validation loss of 6 steps, then the master weights; `moved`
// adds up the bytes offload and auto placement moved (the options really ran).
std::vector<float> sixteen_bit_curve(const std::vector<std::string>& overrides, uint64_t& moved) {
  Trainer t(load_train_config("", overrides));
  std::vector<float> c;
  moved = 0;
  for (int s = 0; s < 6; ++s) {
    const StepStats st = t.train_step();
    c.push_back(st.loss);
    c.push_back(static_cast<float>(st.grad_norm));
    moved += st.offload.bytes_to_host + st.placement.bytes_to_host;
  }
  c.push_back(t.evaluate());
  EXPECT_TRUE(std::isfinite(c.back()));
  t.engine().flush_update();
  const ChunkStore& store = t.model().store();
  for (int c_ = 0; c_ < store.layout().num_chunks(); ++c_) {
    const Tensor m = store.slice(ChunkKind::MASTER, c_);
    c.insert(c.end(), m.f32(), m.f32() + m.numel());
  }
  return c;
}

TEST(SixteenBitOptions, PoliciesOffloadAndPlacementTrainThePlainRunBitwise) {
  const std::string dir = sixteen_bit_data();
  for (const std::string half : {"bf16", "fp16"}) {
    uint64_t moved = 0;
    auto run = [&](const std::string& out, std::vector<std::string> extra) {
      std::vector<std::string> o = sixteen_bit_run(dir, half, half + "_" + out);
      o.push_back("zero_optimization.stage=1");  // 16-bit gradients, as offload keeps them
      o.insert(o.end(), extra.begin(), extra.end());
      return sixteen_bit_curve(o, moved);
    };
    const std::vector<float> plain = run("plain", {});
    const std::vector<std::pair<std::string, std::vector<std::string>>> variants = {
        {"selective", {"activation_checkpointing.policy=selective"}},
        {"full", {"activation_checkpointing.policy=full"}},
        {"offload", {"zero_optimization.offload_optimizer.device=cpu"}},
        {"offload_param",
         {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
          "zero_optimization.offload_param.device=cpu"}},
        // Small chunks and room for about half the model states besides the activations:
        // chunks are evicted and fetched. (The others run at the default chunk size.)
        {"auto",
         {"chunk_size_mb=0.002", "placement.policy=auto", "placement.device_memory_limit=120000"}},
    };
    for (const auto& [name, extra] : variants) {
      const std::vector<float> got = run(name, extra);
      const bool moves = name == "offload" || name == "offload_param" || name == "auto";
      EXPECT_EQ(moved > 0, moves) << half << " " << name << ": " << moved << " bytes moved";
      ASSERT_EQ(got.size(), plain.size()) << half << " " << name;
      EXPECT_EQ(std::memcmp(got.data(), plain.data(), plain.size() * sizeof(float)), 0)
          << half << " " << name << ": first losses " << got[0] << " vs " << plain[0]
          << ", last validation " << got[12] << " vs " << plain[12];
    }
  }
}

}  // namespace
