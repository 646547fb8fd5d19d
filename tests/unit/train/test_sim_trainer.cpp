// tide train with device=sim (issue #25): the Trainer builds the model on the simulated device
// (every chunk, activation and stash in its memory, every op on its stream) and trains the CPU
// run's model bit for bit, in f32 and bf16 with dropout and accumulation: the losses, the
// gradient norms, the validation loss and the checkpoint it writes (weights and Adam state,
// copied from the device a tensor at a time). A sim run resumed from its own checkpoint, and one
// resumed from a CPU run's, go on as the straight run.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint_tensors.h"
#include "error_of.h"
#include "test_files.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/config/unsupported_settings.h"
#include "tide/core/sim_device.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

using namespace tide;
namespace fs = std::filesystem;

namespace {

std::string sim_trainer_data() {
  const std::string dir = test::temp_dir("sim_trainer");
  std::vector<uint16_t> tokens(3000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint16_t>(i % 7 == 0 ? i * 17 % 40 : i % 11 * 3 % 40);
  write_token_shard(dir + "/train.bin", std::span<const uint16_t>(tokens));
  return dir;
}

TrainConfig sim_trainer_config(const std::string& dir, const std::string& out,
                               const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"data.train=" + dir + "/train.bin",
                                "data.val=" + dir + "/train.bin",
                                "out_dir=" + dir + "/" + out,
                                "model.vocab_size=40",
                                "model.n_layer=2",
                                "model.n_head=2",
                                "model.n_embd=16",
                                "model.dropout=0.1",
                                "seq_len=8",
                                "train_micro_batch_size_per_gpu=3",
                                "gradient_accumulation_steps=2",
                                "optimizer.params.lr=1e-2",
                                "eval.sequences=6",
                                "threads=1",
                                "log.progress=false"};
  o.insert(o.end(), extra.begin(), extra.end());
  return load_train_config("", o);
}

// Losses and gradient norms of the steps up to `until`.
std::vector<float> sim_trainer_steps(Trainer& t, int64_t until) {
  std::vector<float> c;
  while (t.step() < until) {
    const StepStats st = t.train_step();
    c.push_back(st.loss);
    c.push_back(static_cast<float>(st.grad_norm));
  }
  return c;
}

void expect_same_checkpoint(const std::string& want, const std::string& got,
                            const std::string& what) {
  // ZeRO writes a folder of shards (one here).
  auto file = [](const std::string& p) {
    return fs::is_directory(p) ? p + "/" + shard_file_name(0, 1) : p;
  };
  const auto a = test::checkpoint_tensors(file(want)), b = test::checkpoint_tensors(file(got));
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_TRUE(a.count("adam_v.wte")) << what << ": the checkpoint must hold the optimizer state";
  for (const auto& [name, bytes] : a) EXPECT_EQ(b.at(name), bytes) << what << ": " << name;
}

TEST(SimTrainer, TrainsValidatesAndCheckpointsAsTheCpuRun) {
  const std::string dir = sim_trainer_data();
  // bf16; the Trainer's tiers for auto placement (chunks on the host, the device's memory the
  // budget, activations included) and for ZeRO-Offload (the optimizer state on the host).
  for (const std::string precision : {"f32", "bf16", "auto", "offload"}) {
    std::vector<std::string> extra;
    if (precision == "bf16") extra.push_back("bf16.enabled=true");
    if (precision == "auto")
      extra = {"placement.policy=auto", "placement.device_memory_limit=120000"};
    if (precision == "offload")
      extra = {"zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=cpu"};
    auto run = [&](const std::string& device, std::vector<float>& curve) {
      std::vector<std::string> e = extra;
      e.push_back("device=" + device);
      Trainer t(sim_trainer_config(dir, precision + "_" + device, e));
      EXPECT_EQ(t.model().op().device.str(), device == "sim" ? "sim:0" : "cpu");
      curve = sim_trainer_steps(t, 6);
      curve.push_back(t.evaluate());
      return t.save("final.ckpt");
    };
    std::vector<float> cpu, sim;
    const std::string cpu_ckpt = run("cpu", cpu), sim_ckpt = run("sim", sim);
    ASSERT_EQ(sim.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_EQ(std::memcmp(&sim[i], &cpu[i], sizeof(float)), 0)
          << precision << ": entry " << i << " (loss, norm per step; validation last): " << sim[i]
          << " on sim, " << cpu[i] << " on the CPU";
    expect_same_checkpoint(cpu_ckpt, sim_ckpt, precision);
  }
  fs::remove_all(dir);
}

TEST(SimTrainer, ResumesItsOwnAndTheCpuRunsCheckpoints) {
  const std::string dir = sim_trainer_data();
  Trainer straight(sim_trainer_config(dir, "straight", {"device=sim"}));
  const std::vector<float> want = sim_trainer_steps(straight, 8);
  const std::string want_ckpt = straight.save("final.ckpt");
  for (const std::string first_device : {"sim", "cpu"}) {
    std::vector<float> got;
    std::string mid;
    {
      Trainer first(sim_trainer_config(dir, "from_" + first_device, {"device=" + first_device}));
      got = sim_trainer_steps(first, 4);
      mid = first.save("model_step4.ckpt");
    }
    Trainer resumed(sim_trainer_config(dir, "from_" + first_device,
                                       {"device=sim", "checkpoint.resume=" + mid}));
    EXPECT_EQ(resumed.step(), 4);
    const std::vector<float> rest = sim_trainer_steps(resumed, 8);
    got.insert(got.end(), rest.begin(), rest.end());
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << "resumed from a " << first_device << " checkpoint";
    expect_same_checkpoint(want_ckpt, resumed.save("final.ckpt"), "from " + first_device);
  }
  fs::remove_all(dir);
}

// A Trainer ended right after a step: the stream may still run the step's AdamW on the chunks
// being freed (a segfault on the stream's thread before the engine and the model waited).
TEST(SimTrainer, EndsSafelyRightAfterAStep) {
  const std::string dir = sim_trainer_data();
  for (int i = 0; i < 3; ++i) {
    Trainer t(sim_trainer_config(dir, "end_" + std::to_string(i), {"device=sim"}));
    t.train_step();
  }
  fs::remove_all(dir);
}

// The process's peak resident memory in KiB since the last reset_peak_rss() (Linux's VmHWM).
int64_t peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6));
  return -1;
}
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5" << std::flush;  // resets VmHWM to the current VmRSS
  return f.good();
}
// AddressSanitizer keeps freed memory resident (its quarantine) and hands out fresh memory
// instead, so under it (scripts/sanitize.sh) the peak resident memory measures its allocator,
// not tide's copies: the tests below check the rest there.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPeakMemoryMeasures = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kPeakMemoryMeasures = false;
#else
constexpr bool kPeakMemoryMeasures = true;
#endif
#else
constexpr bool kPeakMemoryMeasures = true;
#endif
int64_t bytes_on_disk(const std::string& path) {
  if (!fs::is_directory(path)) return static_cast<int64_t>(fs::file_size(path));
  int64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(path))
    if (e.is_regular_file()) n += static_cast<int64_t>(e.file_size());
  return n;
}

// A device model's checkpoint is written and read a tensor at a time (checkpoint/
// tensor_to_write.h, load_into_store): saving raises the host's peak resident memory by far
// less than the checkpoint's bytes, and so do resuming and init_from (a Trainer built and
// stepped once, against a fresh one). A host copy of the model, as before, raised each by every
// state: 25 MB for a 19 MB checkpoint. All on the device, under auto placement (part on the host),
// and ZeRO-1's sharded files. The resumed run takes the next step as the saved one does, and
// init_from's first step is the CPU's, to the bit.
TEST(SimTrainer, CheckpointsWithoutAHostCopyOfTheModel) {
  const std::string dir = sim_trainer_data();
  const std::vector<std::string> wide = {"model.n_embd=256", "model.n_head=4", "threads=1"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"device", {}},
      {"auto", {"placement.policy=auto", "placement.device_memory_limit=12000000"}},
      {"zero1", {"zero_optimization.stage=1"}}};
  // The growth of the peak resident memory over `fn`, in bytes.
  auto growth = [](const std::function<void()>& fn) {
    EXPECT_TRUE(reset_peak_rss());
    const int64_t before = peak_rss_kib();
    fn();
    return (peak_rss_kib() - before) * 1024;
  };
  for (const auto& c : cases) {
    const std::string& name = c.first;  // (clang 14 lambdas cannot capture structured bindings)
    const std::vector<std::string>& keys = c.second;
    std::vector<std::string> e = wide;
    e.insert(e.end(), keys.begin(), keys.end());
    auto config = [&](const std::string& out, const std::string& resume,
                      const std::string& init_from = "", const std::string& device = "sim") {
      std::vector<std::string> k = e;
      if (!resume.empty()) k.push_back("checkpoint.resume=" + resume);
      if (!init_from.empty()) k.push_back("init_from=" + init_from);
      k.push_back("device=" + device);
      return sim_trainer_config(dir, "rss_" + name + "_" + out, k);
    };
    Trainer t(config("run", ""));
    t.train_step();
    // The first save's first copy waits for the step's AdamW, still on the stream, whose first
    // writes of Adam's m and v (12.5 MB here) land inside it: the saves after it are measured.
    t.save("first.ckpt");
    std::string ckpt;
    const int64_t saved = growth([&] { ckpt = t.save("final.ckpt"); });
    const int64_t file = bytes_on_disk(ckpt);
    EXPECT_GT(file, 16 << 20) << name << ": the model is too small to tell";
    if (kPeakMemoryMeasures)
      EXPECT_LT(saved, file / 4) << name << ": saving raised the peak resident memory by " << saved
                                 << " B, for a checkpoint of " << file << " B";
    const float next = t.train_step().loss;
    // A Trainer built and stepped once, fresh and resumed: both have touched every state then.
    const int64_t fresh = growth([&] { Trainer(config("fresh", "")).train_step(); });
    float resumed_next = 0;
    const int64_t resumed =
        growth([&] { resumed_next = Trainer(config("resumed", ckpt)).train_step().loss; });
    EXPECT_EQ(resumed_next, next) << name << ": the resumed run's next loss";
    // Beyond a fresh Trainer: the reader's buffers, of fixed size (the checksum's 4 MiB) or of
    // one tensor (the largest here: 1 MiB), not of the model (the 19 MB of its checkpoint).
    if (kPeakMemoryMeasures)
      EXPECT_LT(resumed - fresh, 8 << 20)
          << name << ": built and stepped once, a resumed Trainer raised the peak resident memory "
          << "by " << resumed << " B, a fresh one by " << fresh << " B, for a checkpoint of "
          << file << " B";
    // init_from reads the weights the same way (the parameters only: a host copy held every
    // state still), and trains the CPU run's model.
    float init_loss = 0;
    const int64_t initialised =
        growth([&] { init_loss = Trainer(config("init", "", ckpt)).train_step().loss; });
    EXPECT_EQ(init_loss, Trainer(config("init_cpu", "", ckpt, "cpu")).train_step().loss)
        << name << ": init_from's first loss on the CPU";
    if (kPeakMemoryMeasures)
      EXPECT_LT(initialised - fresh, 8 << 20)
          << name << ": built and stepped once, a Trainer with init_from raised the peak resident "
          << "memory by " << initialised << " B, a fresh one by " << fresh << " B";
  }
  fs::remove_all(dir);
}

// A device model's store given to the checkpoint writer or reader without a context on its
// device is a clear error, before anything is written: no file, and the model as it was.
TEST(SimTrainer, ADeviceStoreWithoutItsContextIsAClearError) {
  const std::string dir = sim_trainer_data();
  Trainer t(sim_trainer_config(dir, "no_context", {"device=sim"}));
  t.train_step();
  const std::string ckpt = t.save("good.ckpt");  // through the model's context
  const ChunkStore& store = t.model().store();
  CheckpointInfo info;
  info.config = t.model().config();
  const std::string bad = dir + "/bad.ckpt";
  const std::string save_error = test::error_of([&] { save_checkpoint(bad, store, info, true); });
  EXPECT_NE(save_error.find("is in sim:0's memory and no context on that device was given"),
            std::string::npos)
      << save_error;
  EXPECT_FALSE(fs::exists(bad));
  const auto before = test::checkpoint_tensors(ckpt).at("h.0.mlp.c_fc.weight");
  const std::string load_error = test::error_of([&] {
    load_into_store(CheckpointSource(ckpt), t.model().store(), t.model().config(), true);
  });
  EXPECT_NE(load_error.find("is in sim:0's memory and no context on that device was given"),
            std::string::npos)
      << load_error;
  t.save("after.ckpt");
  EXPECT_EQ(test::checkpoint_tensors(dir + "/no_context/after.ckpt").at("h.0.mlp.c_fc.weight"),
            before);
  fs::remove_all(dir);
}

// A one-device step drains the device's queue once (issue #27: the host waits, the device
// idles until it queues more): for the gradient norm. The losses come down without a wait of
// their own (each read before its micro-batch's slot runs again, or after that one wait), and
// ZeRO 0-3's collectives over a one-rank group move nothing and wait for nothing. The loss is
// the same as with a wait per forward: the CPU run's, to the bit. Nor does a step after the
// first allocate device memory (issue #27).
TEST(SimTrainer, AStepDrainsTheDeviceOnceForTheNormAndAllocatesNothing) {
  const std::string dir = sim_trainer_data();
  for (int stage = 0; stage <= 3; ++stage) {
    auto run = [&](const std::string& device, std::vector<float>& losses) {
      Trainer t(
          sim_trainer_config(dir, fmt::format("syncs_{}_{}", stage, device),
                             {"device=" + device, fmt::format("zero_optimization.stage={}", stage),
                              "bf16.enabled=true"}));
      losses.push_back(t.train_step().loss);  // the first step sets up (buffers, uploads)
      const uint64_t before = device == "sim" ? t.model().sim_host_waits() : 0;
      const uint64_t allocations = t.compute_allocator() ? t.compute_allocator()->allocations() : 0;
      for (int s = 0; s < 3; ++s) losses.push_back(t.train_step().loss);
      if (device == "sim")  // and no allocation of device memory after the first step
        EXPECT_EQ(t.compute_allocator()->allocations(), allocations) << "ZeRO stage " << stage;
      return device == "sim" ? t.model().sim_host_waits() - before : 0;
    };
    std::vector<float> cpu, sim;
    run("cpu", cpu);
    EXPECT_EQ(run("sim", sim), 3u) << "ZeRO stage " << stage << ": waits in 3 steps";
    EXPECT_EQ(sim, cpu) << "ZeRO stage " << stage;
  }
  fs::remove_all(dir);
}

// The host ends of the copies are page-locked on a device (issue #27: "copies through pinned
// host memory"). With the pin_memory keys true (offload's defaults), ZeRO-Offload's steps (the
// gradient slices down, the parameters up; the f32 master in f32, offload_param's slices in
// bf16) do not make the host wait for the stream at all, nor allocate device memory. Auto
// placement's moves reuse the memory earlier moves left (ChunkBlocks, memory/chunk_blocks.h)
// without a wait or an allocation: the host waits once per chunk updated on the host tier, once
// per give-back of the free blocks (a move no free block holds, the budget full), and twice per
// step (the norm; before the host zeroes the gradient chunks on the host tier). In steps 2-4,
// 348 moves wait 6 times and allocate nothing (with a block cache per exact size: 282 moves,
// 51 waits, 114 allocations). With a key false each copy through the
// host memory it governs waits once more (sim_device.h keeps CUDA's rule for pageable memory),
// and the model trained is the same.
TEST(SimTrainer, PinnedHostMemoryKeepsTheCopiesOffTheHost) {
  const std::string dir = sim_trainer_data();
  struct Case {
    std::string name;
    std::vector<std::string> keys;
    std::string pin_key;  // the key set false for the pageable run
  };
  const std::vector<Case> cases = {
      {"f32 ZeRO-2 offload",
       {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"},
       "zero_optimization.offload_optimizer.pin_memory"},
      {"bf16 ZeRO-3 offload_param",
       {"bf16.enabled=true", "zero_optimization.stage=3",
        "zero_optimization.offload_optimizer.device=cpu",
        "zero_optimization.offload_param.device=cpu"},
       "zero_optimization.offload_param.pin_memory"},
      // Every chunk gathered on use, as a real model's are (this model's chunks are all under
      // the default persistence threshold): a one-rank gather waits for nothing.
      {"bf16 ZeRO-3 offload_param, no persistent chunks",
       {"bf16.enabled=true", "zero_optimization.stage=3",
        "zero_optimization.offload_optimizer.device=cpu",
        "zero_optimization.offload_param.device=cpu",
        "zero_optimization.stage3_param_persistence_threshold=0"},
       "zero_optimization.offload_param.pin_memory"},
      {"bf16 auto placement",
       {"bf16.enabled=true", "placement.policy=auto", "placement.device_memory_limit=90000"},
       "placement.pin_memory"},
  };
  for (const Case& c : cases) {
    struct Run {
      uint64_t waits = 0, most = 0;  // in steps 2-4
      uint64_t allocations = 0;      // of the compute tier in steps 2-4
      int moves = 0;
      std::vector<float> losses;
    };
    auto run = [&](bool pinned) {
      std::vector<std::string> keys = c.keys;
      keys.insert(keys.end(), {"device=sim", fmt::format("{}={}", c.pin_key, pinned)});
      Trainer t(sim_trainer_config(dir, "pin_" + std::to_string(pinned), keys));
      Run r;
      r.losses.push_back(t.train_step().loss);  // the first step sets up
      const uint64_t before = t.model().sim_host_waits();
      const uint64_t allocated = t.compute_allocator()->allocations();
      for (int s = 0; s < 3; ++s) {
        const StepStats st = t.train_step();
        r.losses.push_back(st.loss);
        const PlacementStepCounters& p = st.placement;
        r.moves += p.moves_to_host + p.moves_to_compute;
        if (t.config().placement_policy == "auto")
          r.most += p.updated_on_host + p.cache_releases + 2;
      }
      r.waits = t.model().sim_host_waits() - before;
      r.allocations = t.compute_allocator()->allocations() - allocated;
      return r;
    };
    const Run pinned = run(true), pageable = run(false);
    EXPECT_LE(pinned.waits, pinned.most) << c.name << ": host waits in 3 steps";
    EXPECT_EQ(pinned.allocations, 0u) << c.name << ": device allocations in 3 steps";
    if (c.pin_key == "placement.pin_memory") {  // moves reuse the memory moves left (ChunkBlocks)
      std::printf(
          "[sim auto placement, pinned] steps 2-4: %d moves, %llu host waits (at most "
          "%llu)\n",
          pinned.moves, static_cast<unsigned long long>(pinned.waits),
          static_cast<unsigned long long>(pinned.most));
      EXPECT_GT(pinned.moves, 30) << "the budget must make the chunks move";
      EXPECT_LT(pinned.waits, pinned.moves / 4) << c.name << ": a move does not wait";
    }
    EXPECT_GT(pageable.waits, pinned.waits + 3)
        << c.name << ": host waits with " << c.pin_key << " false";
    EXPECT_EQ(pinned.losses, pageable.losses) << c.name;
  }
  fs::remove_all(dir);
}

TEST(SimTrainer, ADeviceRunsEveryParallelism) {
  // Checked before the GPU is asked for: the same verdict with or without one. GPUs train in 16
  // bits, data, tensor (sequence too) and pipeline parallel over NCCL, as the simulated device
  // over its stand-in.
  const TrainConfig bf16 = load_train_config("", {"device=cuda", "bf16.enabled=true"});
  EXPECT_NO_THROW(check_trainer_can_honour(bf16, 1));
  EXPECT_NO_THROW(check_trainer_can_honour(bf16, 2));
  for (const char* device : {"device=cuda", "device=sim"}) {
    for (const char* key : {"tensor_parallel.size=2", "tensor_parallel.sequence_parallel=true"})
      EXPECT_NO_THROW(check_trainer_can_honour(
          load_train_config("", {device, "tensor_parallel.size=2", key}), 4))
          << device << " " << key;
    for (const char* schedule : {"pipeline.schedule=1f1b", "pipeline.schedule=zb-v"})
      EXPECT_NO_THROW(check_trainer_can_honour(
          load_train_config("", {device, "pipeline.stages=2", schedule}), 2))
          << device << " " << schedule;
    // pp x dp x tp.
    EXPECT_NO_THROW(check_trainer_can_honour(
        load_train_config("", {device, "pipeline.stages=2", "tensor_parallel.size=2"}), 8))
        << device;
  }
  const std::string bad = test::error_of([&] { load_train_config("", {"device=sim:x"}); });
  EXPECT_NE(bad.find("use cpu, cuda, cuda:N, sim, sim:N or auto"), std::string::npos) << bad;
}

}  // namespace
