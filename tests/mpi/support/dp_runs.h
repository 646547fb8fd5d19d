#pragma once
// What the data-parallel and ZeRO tests share: a shard every rank sees, the small test config,
// a training run that records losses, gradient norms and final parameters, and the equivalence
// checks (see train_dp.cpp for why the data lines up between N ranks and one).

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tide/checkpoint/checkpoint.h"
#include "tide/core/rng.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

namespace tide::dp_runs {

constexpr int kSteps = 20;
constexpr int kMicro = 2;  // b: sequences per micro-batch on each DP rank
constexpr int kSeqLen = 16, kVocab = 64;
constexpr int kEpochSteps = 8;  // global batches per epoch: 20 steps cross two epoch boundaries

// The engine-level pipeline tests' optimizer: AdamW at a constant lr 3e-3, weight decay 0.1,
// clipping at norm 1.
inline OptimizerSettings pipeline_test_optimizer() {
  OptimizerSettings o;
  o.adamw.weight_decay = 0.1;
  o.lr.type = LrScheduleType::CONSTANT;
  o.lr.lr = 3e-3;
  o.grad_clip = 1.0f;
  return o;
}

// A directory every rank sees: rank 0 creates it and broadcasts the name.
inline std::string shared_temp_dir(ProcessGroup& world) {
  std::vector<int32_t> name(256, 0);
  if (world.rank() == 0) {
    char tmpl[] = "/tmp/tide_mpi_dp_XXXXXX";
    TIDE_CHECK(::mkdtemp(tmpl) != nullptr, "cannot create a temporary directory under /tmp");
    for (size_t i = 0; tmpl[i] != 0; ++i) name[i] = tmpl[i];
  }
  world.broadcast(Tensor(name.data(), {256}, DType::I32), 0);
  std::string dir;
  for (int32_t c : name)
    if (c != 0) dir.push_back(static_cast<char>(c));
  return dir;
}

// Rank 0 writes a shard of kEpochSteps*N*b sequences of kSeqLen+1 tokens (consecutive sequences
// share one token); every rank gets the path after a barrier. The tokens follow a simple rule
// (next = 5*prev+3 mod V) with 25% random tokens, so the model has something to learn.
inline std::string write_shared_shard(ProcessGroup& world, const std::string& dir) {
  const std::string path = dir + "/train.bin";
  if (world.rank() == 0) {
    const int64_t sequences = int64_t{kEpochSteps} * world.size() * kMicro;
    std::vector<uint16_t> tokens(static_cast<size_t>(sequences * kSeqLen + 1));
    const PhiloxStream rng{7, 1};
    uint32_t prev = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      prev = rng.uint(2 * i) % 4 == 0 ? rng.uint(2 * i + 1) % kVocab : (5 * prev + 3) % kVocab;
      tokens[i] = static_cast<uint16_t>(prev);
    }
    write_token_shard(path, std::span<const uint16_t>(tokens));
  }
  world.barrier();
  return path;
}

inline TrainConfig dp_config(const std::string& shard, const std::string& out_dir, int micro,
                             int accum, int64_t steps = kSteps, float dropout = 0.0f,
                             const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {
      "data.train=" + shard, "out_dir=" + out_dir, "model.vocab_size=" + std::to_string(kVocab),
      "model.n_layer=2", "model.n_head=2", "model.n_embd=32", "seq_len=" + std::to_string(kSeqLen),
      "train_micro_batch_size_per_gpu=" + std::to_string(micro),
      "gradient_accumulation_steps=" + std::to_string(accum),
      "train_steps=" + std::to_string(steps), fmt::format("model.dropout={}", dropout),
      "data.val=" + shard, "eval.sequences=13", "data.shuffle=true",
      // chunk_size_mb 0: chunks of the largest tensor, so the model has several chunks and
      // several reductions per step.
      "chunk_size_mb=0", "optimizer.params.lr=3e-3", "threads=1", "log.progress=false"};
  o.insert(o.end(), extra.begin(), extra.end());
  return load_train_config("", o);
}

struct RunResult {
  std::vector<float> losses;
  std::vector<float> grad_norms;           // per step, before clipping
  std::vector<std::string> names;          // per tensor id
  std::vector<std::vector<float>> params;  // per tensor id, final values
  // train(): every step's stats (offload's and placement's counters among them) and the peak
  // of the compute tier's allocator (0 when the run has none: no budget, offload or placement).
  std::vector<StepStats> stats;
  size_t compute_peak = 0;
};

inline RunResult train(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world, int64_t steps) {
  Trainer trainer(cfg, world);
  RunResult r;
  for (int64_t s = 0; s < steps; ++s) {
    const StepStats st = trainer.train_step();
    r.losses.push_back(st.loss);
    r.grad_norms.push_back(static_cast<float>(st.grad_norm));
    r.stats.push_back(st);
  }
  if (const Allocator* a = trainer.compute_allocator()) r.compute_peak = a->peak();
  // ZeRO-Offload's delayed update: the final parameters hold every step taken.
  trainer.engine().flush_update();
  const ChunkStore& store = trainer.model().store();
  const ChunkLayout& lay = store.layout();
  // Whole chunks, from every rank's slice (ZeRO-3 holds only its slice of the parameters).
  // 16-bit training: the f32 master weights (sliced from ZeRO-1 on), not their rounded copy.
  const ChunkKind kind = store.compute_dtype() == DType::F32 ? ChunkKind::PARAM : ChunkKind::MASTER;
  std::vector<std::vector<float>> chunks(lay.num_chunks());
  for (int c = 0; c < lay.num_chunks(); ++c) {
    chunks[c].resize(lay.chunk_elems(c));
    const Tensor whole(chunks[c].data(), {lay.chunk_elems(c)});
    if (world)
      world->all_gather(store.slice(kind, c), whole);
    else
      std::memcpy(whole.data, store.chunk(kind, c).data, whole.nbytes());
  }
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const TensorSlot& s = lay.slot(id);
    r.names.push_back(s.name);
    const float* p = chunks[s.chunk].data() + s.offset;
    r.params.emplace_back(p, p + s.numel);
  }
  return r;
}

// What a placement.policy=auto budget for `cfg` (a policy=device run) is made of: this rank's
// model-state bytes (every chunk of every kind it holds) and the non-model bytes auto's warm-up
// records, from a run whose budget holds the states four times over.
struct AutoBudgetParts {
  size_t states = 0, non_model = 0;
};

inline AutoBudgetParts measure_auto_budget(TrainConfig cfg, std::shared_ptr<ProcessGroup> world) {
  AutoBudgetParts p;
  {
    Trainer t(cfg, world);
    p.states = t.model().store().total_bytes();
  }
  cfg.placement_policy = "auto";
  cfg.device_memory_limit = static_cast<int64_t>(4 * p.states);
  Trainer t(cfg, world);
  t.train_step();
  p.non_model = t.engine().auto_placement()->recorded_non_model_bytes();
  return p;
}

// The parameters of checkpoint `path` (a model of `shape`), whole tensors in layout order,
// appended to r.names and r.params (f32: a 16-bit checkpoint's master weights).
inline void read_checkpoint_params(const std::string& path, const GPTConfig& shape, RunResult& r) {
  GPT whole(shape, ActivationPolicy::SAVE_ALL, 0, /*with_optimizer=*/false);
  load_checkpoint(path, whole, /*with_optimizer_state=*/false);
  const ChunkLayout& lay = whole.store().layout();
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const Tensor x = whole.store().tensor(ChunkKind::PARAM, id);
    r.names.push_back(lay.slot(id).name);
    r.params.emplace_back(x.f32(), x.f32() + x.numel());
  }
}

// The small Llama model of the Llama tests (4 query heads over `n_kv_head`, qkv bias, Llama 3's
// RoPE scaling, attention dropout 0.1: the family's one dropout), as config overrides for
// dp_config.
inline std::vector<std::string> small_llama_keys(int n_kv_head, bool tied) {
  return {"model.family=llama",
          "model.dropout=0.1",
          "model.n_head=4",
          fmt::format("model.n_kv_head={}", n_kv_head),
          "model.intermediate_size=48",
          "model.qkv_bias=true",
          fmt::format("model.tie_word_embeddings={}", tied),
          "model.rope_theta=500",
          "model.rope_scaling.type=llama3",
          "model.rope_scaling.original_max_position_embeddings=16",
          "eval.sequences=5"};
}

// A run whose parameters are read back from the checkpoint it writes: under tensor parallelism
// the checkpoint holds the whole model, so runs at any tp compare tensor by tensor.
struct CheckpointedRun {
  RunResult r;  // params: the whole model, from the checkpoint
  float val = 0;
};

// `steps` steps of `t` from where it is, then the validation loss and a checkpoint `name`
// (collective: every rank calls it).
inline CheckpointedRun train_and_save(Trainer& t, int64_t steps, const std::string& name) {
  CheckpointedRun out;
  for (int64_t s = 0; s < steps; ++s) {
    const StepStats st = t.train_step();
    out.r.losses.push_back(st.loss);
    out.r.grad_norms.push_back(static_cast<float>(st.grad_norm));
  }
  out.val = t.evaluate();
  read_checkpoint_params(t.save(name), t.config().model, out.r);
  return out;
}

// The first difference between two runs' bits (a loss, a gradient norm, a final tensor), or ""
// when they are bitwise equal.
inline std::string differs(const RunResult& a, const RunResult& b) {
  for (size_t s = 0; s < a.losses.size(); ++s) {
    if (std::memcmp(&a.losses[s], &b.losses[s], 4) != 0)
      return fmt::format("loss of step {}: {} vs {}", s + 1, a.losses[s], b.losses[s]);
    if (std::memcmp(&a.grad_norms[s], &b.grad_norms[s], 4) != 0)
      return fmt::format("grad norm of step {}: {} vs {}", s + 1, a.grad_norms[s], b.grad_norms[s]);
  }
  for (size_t i = 0; i < a.params.size(); ++i)
    if (std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * 4) != 0)
      return "final values of " + a.names[i];
  return "";
}

// ||a - b|| / ||b||
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The element ranges of a parameter tensor that must agree between equivalent runs: all of it,
// except the key third of the fused QKV bias (3C) = [q | k | v]. Its exact gradient is zero (a
// key bias adds q.b_k to every score of a query row; softmax ignores a constant per row), so
// what backward computes there is float rounding noise, different for every summation order.
// Adam divides by sqrt(v), the size of that noise, so these entries take lr-sized random steps:
// they differ between equivalent runs by O(lr) (measured: relative error ~1 on that slice, ~1e-7
// everywhere else) and cannot affect the loss.
inline std::vector<std::pair<size_t, size_t>> compared_ranges(const std::string& name, size_t n) {
  if (name.ends_with("attn.c_attn.bias")) return {{0, n / 3}, {2 * n / 3, n}};
  return {{0, n}};
}

// Losses to 1e-5 relative; the whole parameter vector to 1e-4 relative and every parameter
// tensor to `per_tensor` (Frobenius norms). The gradient norms too (1e-5): Adam is nearly blind
// to a constant factor on the gradients, so parameters alone would not catch gradients that are
// summed instead of averaged over ranks.
inline void expect_equivalent(const RunResult& dp, const RunResult& base, const char* what,
                              double per_tensor = 1e-4) {
  ASSERT_EQ(dp.losses.size(), base.losses.size());
  for (size_t s = 0; s < base.losses.size(); ++s) {
    EXPECT_NEAR(dp.losses[s], base.losses[s], 1e-5 * std::abs(base.losses[s]))
        << what << ", step " << s + 1;
    EXPECT_NEAR(dp.grad_norms[s], base.grad_norms[s], 1e-5 * base.grad_norms[s])
        << what << ", gradient norm at step " << s + 1;
  }
  ASSERT_EQ(dp.params.size(), base.params.size());
  std::vector<float> all_a, all_b;
  for (size_t id = 0; id < base.params.size(); ++id)
    for (const auto& [begin, end] : compared_ranges(base.names[id], base.params[id].size())) {
      const std::vector<float> a(dp.params[id].begin() + begin, dp.params[id].begin() + end);
      const std::vector<float> b(base.params[id].begin() + begin, base.params[id].begin() + end);
      EXPECT_LE(rel_error(a, b), per_tensor)
          << what << ", " << base.names[id] << " [" << begin << ", " << end << ")";
      all_a.insert(all_a.end(), a.begin(), a.end());
      all_b.insert(all_b.end(), b.begin(), b.end());
    }
  EXPECT_LE(rel_error(all_a, all_b), 1e-4) << what << ", all parameters";
}

// Every rank's run must equal rank 0's bit for bit: all ranks apply the same averaged gradients.
inline void expect_same_on_every_rank(ProcessGroup& world, const RunResult& r) {
  std::vector<float> flat(r.losses);
  flat.insert(flat.end(), r.grad_norms.begin(), r.grad_norms.end());
  for (const auto& p : r.params) flat.insert(flat.end(), p.begin(), p.end());
  std::vector<float> root(flat);
  world.broadcast(Tensor(root.data(), {static_cast<int64_t>(root.size())}), 0);
  EXPECT_EQ(std::memcmp(root.data(), flat.data(), flat.size() * sizeof(float)), 0)
      << "rank " << world.rank() << " ended with parameters or losses different from rank 0";
}

}  // namespace tide::dp_runs
