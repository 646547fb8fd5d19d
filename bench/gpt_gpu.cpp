// bench_gpt_gpu: training throughput of GPT-2 on a GPU through tide's Trainer, the path
// `tide train device=cuda` runs (issue #27), next to its PyTorch peer: bench/gpu/gpt_torch.py
// runs the same models, sequence and micro-batch on the same GPU and prints the same lines.
//
// Per model (a preset, e.g. gpt2-124m) it finds the micro-batch that fits (--B 0: the largest
// of 64, 32, ... 1 whose first steps run without running out of device memory), then times
// --steps steps after --warmup ones on a fixed synthetic token stream (uniform ids over the
// model's vocabulary: the time of a step does not depend on the values).
//
// Model FLOPs per token as llm.c counts them (gpt2_estimate_mfu): 6N + 6LCT, N all parameters
// (the tied head once), the attention's QK^T and AV at half the full T x T (the causal part).
// MFU = achieved FLOP/s / --peak-tflops (the GPU's measured bf16 peak: bench_gpu_ops's "peak"
// line, in the same gpu_check run); without --peak-tflops no MFU is printed.
//
// One JSON line per model:
//   impl "tide", model, params, B, T, dtype, device, steps, step_ms (median), step_ms_min,
//   tokens_per_s (median step), tflops, mfu (with --peak-tflops), peak_device_bytes (the device
//   allocator's peak: model states, activations, buffers; not the CUDA libraries' workspaces
//   or the kernels' scratch), loss_first and loss_last (the loss must fall: the steps train),
//   tried (the micro-batches that did not fit, with the error)
// and an "error" line for a model where not even B = 1 fits.
//
// Usage: bench_gpt_gpu [--models gpt2-124m,gpt2-350m] [--T 1024] [--B 0] [--steps 10]
//                      [--warmup 3] [--dtype bf16] [--device cuda] [--peak-tflops X]
//                      [--set key=value ...]
// --models custom: no preset, the shape from --set (model.n_layer=...); --set adds config keys
// to every run (zero_optimization.offload_optimizer.device=cpu, placement.policy=auto, ...).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tide/core/allocator.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

using namespace tide;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;

struct Args {
  std::vector<std::string> models = {"gpt2-124m", "gpt2-350m"};
  int T = 1024, B = 0, steps = 10, warmup = 3;
  std::string dtype = "bf16", device = "cuda";
  double peak_tflops = 0;
  std::vector<std::string> set;
};

// A run that does not fit the device: the allocator's budget or the device itself.
bool out_of_memory(const Error& e) {
  const std::string m = e.what();
  return dynamic_cast<const OutOfBudget*>(&e) != nullptr ||
         m.find("could not allocate") != std::string::npos ||
         m.find("out of memory") != std::string::npos;
}

// Uniform ids in [0, vocab) into dir/train.bin, enough for `tokens` positions.
std::string write_synthetic_shard(const fs::path& dir, int vocab, int64_t tokens) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> id(0, vocab - 1);
  std::vector<uint16_t> t(static_cast<size_t>(tokens));
  for (auto& x : t) x = static_cast<uint16_t>(id(rng));
  const std::string path = (dir / "train.bin").string();
  write_token_shard(path, std::span<const uint16_t>(t));
  return path;
}

TrainConfig run_config(const Args& a, const std::string& model, int B, const fs::path& dir,
                       const std::string& shard) {
  std::vector<std::string> o = {"device=" + a.device,
                                "seq_len=" + std::to_string(a.T),
                                "train_micro_batch_size_per_gpu=" + std::to_string(B),
                                "gradient_accumulation_steps=1",
                                "data.train=" + shard,
                                "data.val=" + shard,
                                "eval.sequences=1",
                                "log.progress=false",
                                "out_dir=" + (dir / ("run_" + std::to_string(B))).string(),
                                "out_dir_overwrite=true"};
  if (model != "custom") o.push_back("model.preset=" + model);
  if (a.dtype == "bf16") o.push_back("bf16.enabled=true");
  if (a.dtype == "fp16") o.push_back("fp16.enabled=true");
  o.insert(o.end(), a.set.begin(), a.set.end());
  return load_train_config("", o);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One model: the micro-batch that fits, then the timed steps. Returns its JSON line.
json bench_model(const Args& a, const std::string& model) {
  const fs::path dir =
      fs::temp_directory_path() / ("tide_bench_gpt_gpu_" + std::to_string(getpid()));
  fs::create_directories(dir);
  // The shape first (no device touched; the config wants its data file to exist: a
  // placeholder until the vocabulary is known): vocabulary, parameters, layers, width.
  const GPTConfig shape = run_config(a, model, 1, dir, write_synthetic_shard(dir, 1, 2)).model;
  TIDE_CHECK(shape.vocab_size > 0 && shape.vocab_size <= 65536,
             "{}: the synthetic tokens need a vocabulary of 1 to 65536 ids (got {}); with "
             "--models custom set model.vocab_size",
             model, shape.vocab_size);
  const int64_t per_run = int64_t{a.warmup + a.steps + 1} * a.T;
  const std::vector<int> candidates =
      a.B > 0 ? std::vector<int>{a.B} : std::vector<int>{64, 32, 16, 8, 4, 2, 1};
  const std::string shard =
      write_synthetic_shard(dir, shape.vocab_size, per_run * candidates.front() + a.T + 1);
  json line = {{"bench", "gpt_gpu"},
               {"impl", "tide"},
               {"model", model},
               {"T", a.T},
               {"dtype", a.dtype},
               {"device", a.device},
               {"params", shape.num_parameters()},
               {"set", a.set}};
  json tried = json::array();
  for (int B : candidates) {
    std::optional<Trainer> t;
    std::vector<double> ms;
    std::vector<float> losses;
    try {
      // Progress on stderr: a large model's set-up and steps take minutes, and a run stopped
      // for time still says how far it got.
      const auto built = std::chrono::steady_clock::now();
      std::fprintf(stderr, "bench_gpt_gpu: %s B=%d: building the trainer\n", model.c_str(), B);
      t.emplace(run_config(a, model, B, dir, shard));
      std::fprintf(stderr, "bench_gpt_gpu: %s B=%d: built in %.1f s\n", model.c_str(), B,
                   seconds_since(built));
      for (int s = 0; s < a.warmup + a.steps; ++s) {
        const auto t0 = std::chrono::steady_clock::now();
        const StepStats st = t->train_step();  // ends with the loss read back: synchronised
        const double dt = seconds_since(t0) * 1e3;
        std::fprintf(stderr, "bench_gpt_gpu: %s B=%d: step %d of %d: %.1f ms\n", model.c_str(), B,
                     s + 1, a.warmup + a.steps, dt);
        losses.push_back(st.loss);
        if (s >= a.warmup) ms.push_back(dt);
      }
    } catch (const Error& e) {
      if (!out_of_memory(e)) throw;
      tried.push_back({{"B", B}, {"error", e.what()}});
      continue;
    }
    const double step_ms = median(ms);
    const double tokens_per_s = B * a.T / (step_ms / 1e3);
    const double flops_per_token = 6.0 * static_cast<double>(shape.num_parameters()) +
                                   6.0 * shape.n_layer * shape.n_embd * a.T;
    const double tflops = flops_per_token * tokens_per_s / 1e12;
    line.update({{"B", B},
                 {"steps", a.steps},
                 {"step_ms", step_ms},
                 {"step_ms_min", *std::min_element(ms.begin(), ms.end())},
                 {"tokens_per_s", tokens_per_s},
                 {"flops_per_token", flops_per_token},
                 {"tflops", tflops},
                 {"peak_device_bytes", t->compute_allocator() ? t->compute_allocator()->peak() : 0},
                 {"loss_first", losses.front()},
                 {"loss_last", losses.back()},
                 {"tried", tried}});
    if (a.peak_tflops > 0) line["mfu"] = tflops / a.peak_tflops;
    t.reset();
    fs::remove_all(dir);
    return line;
  }
  fs::remove_all(dir);
  line.update({{"error", "no micro-batch fits"}, {"tried", tried}});
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"training throughput of GPT-2 on a GPU through tide's Trainer (JSON lines)"};
  app.add_option("--models", a.models, "model presets, or custom (the shape from --set)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--T", a.T, "sequence length")->capture_default_str();
  app.add_option("--B", a.B, "micro-batch; 0 = the largest of 64, 32, ... 1 that fits")
      ->capture_default_str();
  app.add_option("--steps", a.steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", a.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--dtype", a.dtype, "f32, bf16 or fp16")->capture_default_str();
  app.add_option("--device", a.device, "the device key: cuda, cuda:N, sim, cpu")
      ->capture_default_str();
  app.add_option("--peak-tflops", a.peak_tflops, "the GPU's measured peak, for MFU");
  app.add_option("--set", a.set, "a config key=value for every run (repeatable)");
  try {
    bench::parse_args(app, argc, argv);
    TIDE_CHECK(a.steps >= 1 && a.warmup >= 0 && a.T >= 1 && a.B >= 0,
               "--steps must be >= 1, --warmup >= 0, --T >= 1 and --B >= 0");
    TIDE_CHECK(a.dtype == "f32" || a.dtype == "bf16" || a.dtype == "fp16",
               "--dtype {}: use f32, bf16 or fp16", a.dtype);
    for (const std::string& m : a.models) {
      std::printf("%s\n", bench_model(a, m).dump().c_str());
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gpt_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
