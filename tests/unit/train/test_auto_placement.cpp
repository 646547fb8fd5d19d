// placement.policy=auto through tide train's run loop on one process: metrics.jsonl carries the
// placement counters of every logged step (absent with policy=device), and a checkpoint written
// under auto resumes to the same bits as the uninterrupted run (with policy=device).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "test_files.h"
#include "tide/config/estimate_setup.h"
#include "tide/core/byte_size.h"
#include "tide/data/shard.h"
#include "tide/estimate/memory_estimate.h"
#include "tide/train/trainer.h"

using namespace tide;

namespace {

std::vector<std::string> overrides(const std::string& dir, int64_t steps) {
  return {"data.train=" + dir + "/train.bin",
          "model.vocab_size=50",
          "model.n_layer=2",
          "model.n_head=2",
          "model.n_embd=16",
          "seq_len=8",
          "train_steps=" + std::to_string(steps),
          "log.interval=1",
          "out_dir=" + dir,
          "log.progress=false",
          "chunk_size_mb=0.002",
          "threads=1"};
}

std::string write_data(const char* name) {
  const std::string dir = test::temp_dir(name);
  std::vector<uint16_t> tokens(2000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 7 % 50);
  write_token_shard(dir + "/train.bin", std::span<const uint16_t>(tokens));
  return dir;
}

// Half of the model states plus the non-model bytes of a warm-up with room for everything.
int64_t half_budget(const std::string& dir, const std::vector<std::string>& extra = {}) {
  auto with_extra = [&] {
    std::vector<std::string> o = overrides(dir, 1);
    o.insert(o.end(), extra.begin(), extra.end());
    return o;
  };
  size_t states = 0;
  {
    Trainer t(load_train_config("", with_extra()));
    states = t.model().store().total_bytes();
  }
  std::vector<std::string> o = with_extra();
  o.push_back("placement.policy=auto");
  o.push_back("placement.device_memory_limit=" + std::to_string(4 * states));
  Trainer t(load_train_config("", o));
  t.train_step();
  return static_cast<int64_t>(states / 2 + t.engine().auto_placement()->recorded_non_model_bytes());
}

std::vector<float> all_params(Trainer& t) {
  const ChunkStore& store = t.model().store();
  std::vector<float> p;
  for (int c = 0; c < store.layout().num_chunks(); ++c) {
    const Tensor x = store.chunk(ChunkKind::PARAM, c);
    p.insert(p.end(), x.f32(), x.f32() + x.numel());
  }
  return p;
}

TEST(AutoPlacementMetrics, EveryTrainingRecordCarriesTheCounters) {
  const std::string dir = write_data("auto_metrics");
  const int64_t budget = half_budget(dir);
  for (bool automatic : {true, false}) {
    std::vector<std::string> o = overrides(dir + (automatic ? "/auto" : "/device"), 3);
    o[0] = "data.train=" + dir + "/train.bin";
    if (automatic) {
      o.push_back("placement.policy=auto");
      o.push_back("placement.device_memory_limit=" + std::to_string(budget));
    }
    Trainer t(load_train_config("", o));
    t.run();
    const int chunks = t.model().store().layout().num_chunks();
    std::ifstream f(dir + (automatic ? "/auto" : "/device") + "/metrics.jsonl");
    int records = 0;
    for (std::string line; std::getline(f, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!j.contains("loss")) continue;
      ++records;
      EXPECT_EQ(j.contains("placement_bytes_to_host"), automatic) << line;
      if (!automatic) continue;
      EXPECT_GT(j["placement_bytes_to_device"].get<uint64_t>(), 0u) << line;
      EXPECT_GT(j["placement_evictions"].get<int>(), 0) << line;
      EXPECT_GT(j["placement_moves"].get<int>(), 0) << line;
      EXPECT_GE(j["placement_wait_seconds"].get<double>(), 0.0) << line;
      EXPECT_EQ(
          j["placement_updated_on_device"].get<int>() + j["placement_updated_on_host"].get<int>(),
          chunks)
          << line;
    }
    EXPECT_EQ(records, 3);
  }
}

// A budget too small for the run fails in auto's first step, which runs before anything is
// written: out_dir stays empty, and the error says so and gives tide estimate's figure.
TEST(AutoPlacementBudget, TooSmallIsRefusedBeforeAnythingIsWritten) {
  const std::string dir = write_data("auto_too_small");
  std::vector<std::string> o = overrides(dir + "/out", 3);
  o[0] = "data.train=" + dir + "/train.bin";
  o.push_back("placement.policy=auto");
  o.push_back("placement.device_memory_limit=1000");
  o.push_back("data.val=" + dir + "/train.bin");
  Trainer t(load_train_config("", o));
  std::string msg;
  try {
    t.run();
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("placement.device_memory_limit (1000 B) is below the non-model memory"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("placement.policy=auto stopped in its first step, before anything was "
                     "written to out_dir '" +
                     dir + "/out'"),
            std::string::npos)
      << msg;
  const int64_t least =
      estimate_memory(setup_from_train_config(load_train_config("", o))).limit.least_limit;
  EXPECT_NE(msg.find("puts the least limit for this config at " + format_bytes(least)),
            std::string::npos)
      << msg;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out")) << "nothing is written";
}

TEST(AutoPlacementResume, ACheckpointResumesBitwise) {
  const std::string dir = write_data("auto_resume");
  const int64_t budget = half_budget(dir);
  auto config = [&](const std::string& out, int64_t steps, const std::string& resume,
                    bool automatic = true) {
    std::vector<std::string> o = overrides(dir, steps);
    o[8] = "out_dir=" + out;
    if (automatic) {
      o.push_back("placement.policy=auto");
      o.push_back("placement.device_memory_limit=" + std::to_string(budget));
    }
    if (!resume.empty()) o.push_back("checkpoint.resume=" + resume);
    return load_train_config("", o);
  };
  // The uninterrupted run with policy=device: auto changes no bit, resumed or not.
  Trainer straight(config(dir + "/straight", 4, "", /*automatic=*/false));
  for (int s = 0; s < 4; ++s) straight.train_step();
  std::string ckpt;
  {
    Trainer first(config(dir + "/first", 4, ""));
    for (int s = 0; s < 2; ++s) first.train_step();
    ckpt = first.save("step2.ckpt");
  }
  Trainer resumed(config(dir + "/resumed", 4, ckpt));
  for (int s = 0; s < 2; ++s) resumed.train_step();
  const std::vector<float> a = all_params(straight), b = all_params(resumed);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

// The placement allocates the chunks itself, soonest first use first on the compute tier, so
// the host never holds all of them: at the start it holds exactly what the device's budget left
// out, and over the steps it peaks below the model states (before, every chunk started on the
// host: its peak was all of them). The estimate's host figure (pageable memory: the states the
// device cannot keep) bounds the host's peak.
TEST(AutoPlacementStart, TheHostHoldsOnlyWhatTheDeviceLeaves) {
  const std::string dir = write_data("auto_start");
  // Wider than the others' model: its states outweigh the activations, so half of them plus
  // the non-model bytes leaves some on the host.
  const std::vector<std::string> wide = {"model.n_embd=64"};
  const int64_t budget = half_budget(dir, wide);
  std::vector<std::string> o = overrides(dir, 3);
  o.insert(o.end(), wide.begin(), wide.end());
  o.push_back("placement.policy=auto");
  o.push_back("placement.device_memory_limit=" + std::to_string(budget));
  Trainer t(load_train_config("", o));
  const AutoPlacement& placement = *t.engine().auto_placement();
  const size_t states = t.model().store().total_bytes();
  const size_t on_device = placement.compute_chunk_bytes();
  const size_t on_host = t.host_allocator()->allocated();
  EXPECT_GT(on_device, 0u) << "the compute tier is filled at the start";
  EXPECT_LE(t.compute_allocator()->allocated(), static_cast<size_t>(budget));
  EXPECT_EQ(on_host + on_device, states) << "every chunk is placed once";
  for (int s = 0; s < 3; ++s) t.train_step();
  const int64_t estimated_host =
      estimate_memory(setup_from_train_config(load_train_config("", o))).host.total();
  std::printf(
      "[auto start] %zu B of states: %zu B on the device and %zu B on the host at the start; "
      "host peak %zu B over 3 steps (estimate %lld B)\n",
      states, on_device, on_host, t.host_allocator()->peak(),
      static_cast<long long>(estimated_host));
  EXPECT_LT(t.host_allocator()->peak(), states);
  EXPECT_LE(t.host_allocator()->peak(), static_cast<size_t>(estimated_host));
}

// `tide estimate`'s least limit for auto (estimate/limit_fit.h: non-model bytes + the largest
// block's chunks) against the runtime: the same config trains at that budget. The runtime's
// non-model record (activation arenas in use + ZeRO buffers) must be within the estimate's
// non-model bytes, or the least would not be enough.
TEST(AutoPlacementEstimate, TrainsAtTheEstimatesLeastLimit) {
  const std::string dir = write_data("auto_least");
  for (int recompute = 0; recompute < 2; ++recompute) {
    std::vector<std::string> o = overrides(dir, 2);
    if (recompute) o.push_back("activation_checkpointing.policy=full");
    o.push_back("placement.policy=auto");
    o.push_back("placement.device_memory_limit=100000000");
    TrainSetup s = setup_from_train_config(load_train_config("", o));
    ASSERT_EQ(s.placement, Placement::Auto);
    const LimitFit f = estimate_memory(s).limit;
    ASSERT_GT(f.least_limit, 0);
    ASSERT_LT(f.least_limit, f.non_model + f.states);  // states do not all fit: chunks move
    o.back() = "placement.device_memory_limit=" + std::to_string(f.least_limit);
    Trainer t(load_train_config("", o));
    const StepStats first = t.train_step();
    const StepStats second = t.train_step();
    const size_t recorded = t.engine().auto_placement()->recorded_non_model_bytes();
    std::printf(
        "[auto least] recompute %s: estimate non-model %lld B + largest block %lld B = least %lld "
        "B; runtime recorded non-model %zu B, peak %zu B, %llu B moved to the device in step 2\n",
        recompute ? "full" : "none", static_cast<long long>(f.non_model),
        static_cast<long long>(f.largest_group), static_cast<long long>(f.least_limit), recorded,
        t.compute_allocator()->peak(),
        static_cast<unsigned long long>(second.placement.bytes_to_compute));
    EXPECT_LE(recorded, static_cast<size_t>(f.non_model));
    EXPECT_LE(t.compute_allocator()->peak(), static_cast<size_t>(f.least_limit));
    EXPECT_TRUE(std::isfinite(first.loss) && std::isfinite(second.loss));
    EXPECT_GE(second.placement.bytes_to_compute, static_cast<uint64_t>(f.least_moved));
  }
}

}  // namespace
