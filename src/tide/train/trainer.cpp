#include "tide/train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tide/comm/distributed.h"
#include "tide/comm/local_process_group.h"
#include "tide/data/prepare.h"
#include "tide/optim/grad_norm.h"
#include "tide/optim/lr_schedule.h"
#include "tide/train/checkpoint.h"
#include "tide/train/optimizer_step.h"

namespace tide {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string human_duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600)
    return fmt::format("{}m{:02d}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return fmt::format("{}h{:02d}m", static_cast<int>(s) / 3600, static_cast<int>(s) % 3600 / 60);
}

// Where the embedded default corpus goes (prepared once, reused by later runs).
constexpr const char* kDefaultDataDir = "data/fortunes";

}  // namespace

Trainer::Trainer(TrainConfig config, std::shared_ptr<ProcessGroup> world)
    : cfg_(std::move(config)), world_(std::move(world)) {
  if (!world_) world_ = std::make_shared<LocalProcessGroup>();
  TIDE_CHECK(cfg_.device == "cpu" || cfg_.device == "auto",
             "device '{}' is not available: this build's CUDA kernels are not ready yet; use "
             "device=cpu",
             cfg_.device);
  TIDE_CHECK(!cfg_.bf16 && !cfg_.fp16,
             "bf16.enabled / fp16.enabled need the CUDA backend; on the CPU tide trains in f32 "
             "(set them to false)");
  if (cfg_.threads > 0) omp_set_num_threads(cfg_.threads);
  const int dp = world_->size();
  if (cfg_.train_batch_size > 0)
    TIDE_CHECK(cfg_.train_batch_size == cfg_.micro_batch * cfg_.grad_accum * dp,
               "train_batch_size {} != train_micro_batch_size_per_gpu {} x "
               "gradient_accumulation_steps {} x data-parallel ranks {}; fix one of them (or set "
               "train_batch_size to 0)",
               cfg_.train_batch_size, cfg_.micro_batch, cfg_.grad_accum, dp);
  resolve_data();

  const int64_t chunk_elems = static_cast<int64_t>(cfg_.chunk_size_mb * 1048576.0 / 4.0);
  model_ = std::make_unique<GPT>(cfg_.model, cfg_.activation_policy, chunk_elems, true, dp);
  model_->init_weights(cfg_.seed);
  mb_ = model_->make_micro_batch(cfg_.micro_batch, cfg_.seq_len);

  // Data parallelism (ZeRO stage 0): average each chunk's gradients over the DP ranks as soon
  // as the chunk is complete, overlapping the reduction with the rest of backward.
  if (dp > 1) {
    model_->store().on_chunk_grads_ready = [this](int c) {
      pending_.push_back(
          world_->all_reduce_async(model_->store().chunk(ChunkKind::GRAD, c), ReduceOp::Avg));
    };
  }
}

Trainer::~Trainer() {
  for (auto& w : pending_) w->wait();  // never leave a collective writing into freed chunks
}

void Trainer::resolve_data() {
  const bool rank0 = world_->rank() == 0;
  if (cfg_.is_default_run) {
    cfg_.data_dir = kDefaultDataDir;
    if (!prepared_corpus_exists(cfg_.data_dir)) {
      if (rank0) {
        fmt::print("tide: preparing the default corpus (Debian fortunes) into {} ...\n",
                   cfg_.data_dir);
        prepare_corpus(default_corpus_options(cfg_.data_dir));
      }
      world_->barrier_async()->wait();
    }
  }
  if (!cfg_.data_dir.empty()) {
    TIDE_CHECK(fs::is_directory(cfg_.data_dir),
               "data.dir '{}' does not exist; create it with `tide prepare --input <text files> "
               "--out-dir {}`",
               cfg_.data_dir, cfg_.data_dir);
    // A directory from `tide prepare` describes itself in meta.json; without one, the
    // standard file names are assumed and model.vocab_size must be given.
    PrepareResult r;
    r.train_path = (fs::path(cfg_.data_dir) / "train.bin").string();
    r.val_path = (fs::path(cfg_.data_dir) / "val.bin").string();
    r.tokenizer_path = (fs::path(cfg_.data_dir) / "tokenizer.json").string();
    if (prepared_corpus_exists(cfg_.data_dir)) {
      r = read_prepared_corpus(cfg_.data_dir);
      unigram_ = r.val_unigram_entropy;
      if (cfg_.model.vocab_size == 0) cfg_.model.vocab_size = r.vocab_size;
    }
    if (cfg_.train_data.empty()) cfg_.train_data = r.train_path;
    if (cfg_.val_data.empty()) cfg_.val_data = r.val_path;
    tokenizer_path_ = r.tokenizer_path;
  }
  TIDE_CHECK(!cfg_.train_data.empty(),
             "no training data: set data.dir (from `tide prepare`) or data.train");
  TIDE_CHECK(cfg_.model.vocab_size > 0,
             "model.vocab_size is unknown: set it, or use a data.dir whose meta.json gives it");
  const int dp = world_->size(), rank = world_->rank();
  train_loader_ =
      std::make_unique<DataLoader>(expand_shard_paths({cfg_.train_data}), cfg_.micro_batch,
                                   cfg_.seq_len, rank, dp, cfg_.seed, cfg_.shuffle);
  train_loader_->check_vocab(cfg_.model.vocab_size);
  if (!cfg_.val_data.empty() && fs::exists(cfg_.val_data)) {
    val_loader_ =
        std::make_unique<DataLoader>(expand_shard_paths({cfg_.val_data}), cfg_.micro_batch,
                                     cfg_.seq_len, rank, dp, cfg_.seed, false);
    val_loader_->check_vocab(cfg_.model.vocab_size);
  }
}

StepStats Trainer::train_step() {
  const auto t0 = Clock::now();
  ChunkStore& store = model_->store();
  store.zero(ChunkKind::GRAD);
  store.begin_step();
  const uint64_t sent_before = world_->counters().bytes_sent;
  double loss_sum = 0;
  for (int micro = 0; micro < cfg_.grad_accum; ++micro) {
    if (batch_source) {
      batch_source(step_, micro, mb_->tokens.i32(), mb_->targets.i32());
    } else {
      train_loader_->next_batch();
      std::memcpy(mb_->tokens.data, train_loader_->inputs().data(), mb_->tokens.nbytes());
      std::memcpy(mb_->targets.data, train_loader_->targets().data(), mb_->targets.nbytes());
    }
    mb_->training = true;
    mb_->seed = cfg_.seed;
    mb_->step = static_cast<uint64_t>(step_);
    mb_->index = micro;
    mb_->dloss = 1.0f / static_cast<float>(cfg_.grad_accum);
    loss_sum += model_->forward(*mb_);
    // Gradients are marked complete (and reduced) only after the last micro-batch, so
    // accumulation communicates once per step.
    model_->backward(*mb_, /*last_micro_batch=*/micro == cfg_.grad_accum - 1);
  }
  const auto t_comm = Clock::now();
  for (auto& w : pending_) w->wait();
  StepStats st;
  st.comm_seconds = seconds_since(t_comm);
  // Only gradient reductions have run on world_ since sent_before (the loss comes later).
  st.grad_reductions = static_cast<int>(pending_.size());
  st.grad_bytes_sent = world_->counters().bytes_sent - sent_before;
  pending_.clear();

  // Global gradient norm over all chunks (padding is zero). Every rank holds the same averaged
  // gradients, so every rank computes the same norm and takes the same step.
  std::vector<GradBuffer> bufs;
  for (int c = 0; c < store.layout().num_chunks(); ++c) {
    const Tensor g = store.chunk(ChunkKind::GRAD, c);
    bufs.push_back({g.data, g.dtype, g.numel()});
  }
  st.grad_norm = std::sqrt(grad_norm_squared(bufs));
  TIDE_CHECK(std::isfinite(st.grad_norm),
             "the gradient norm at step {} is not finite (NaN/Inf); lower the learning rate or "
             "enable gradient_clipping",
             step_ + 1);
  const float clip = cfg_.grad_clip > 0 ? clip_coefficient(st.grad_norm, cfg_.grad_clip) : 1.0f;
  LrSchedule sched;
  sched.lr = static_cast<float>(cfg_.lr);
  sched.min_lr = static_cast<float>(cfg_.lr * cfg_.min_lr_ratio);
  sched.warmup_steps = cfg_.warmup_steps;
  sched.max_steps = cfg_.decay_steps;
  st.lr = lr_at(step_, sched);
  apply_optimizer(st.lr, clip);

  // The logged loss is the mean over the global batch.
  const float loss = mean_over_ranks(static_cast<float>(loss_sum / cfg_.grad_accum));
  ++step_;
  st.step = step_;
  st.loss = loss;
  st.tokens = int64_t{cfg_.micro_batch} * cfg_.seq_len * cfg_.grad_accum * world_->size();
  st.seconds = seconds_since(t0);
  return st;
}

void Trainer::apply_optimizer(float lr, float clip_coef) {
  AdamWHyper h;
  h.lr = lr;
  h.beta1 = cfg_.beta1;
  h.beta2 = cfg_.beta2;
  h.eps = cfg_.eps;
  h.weight_decay = cfg_.weight_decay;
  adamw_step(model_->store(), h, AdamWStep{step_ + 1, clip_coef});
}

float Trainer::mean_over_ranks(float x) const {
  if (world_->size() > 1) world_->all_reduce_async(Tensor(&x, Shape{1}), ReduceOp::Avg)->wait();
  return x;
}

float Trainer::evaluate() {
  if (!val_loader_) return NAN;
  val_loader_->reset();
  const int n =
      std::max<int64_t>(1, std::min<int64_t>(cfg_.eval_steps, val_loader_->batches_per_epoch()));
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    val_loader_->next_batch();
    std::memcpy(mb_->tokens.data, val_loader_->inputs().data(), mb_->tokens.nbytes());
    std::memcpy(mb_->targets.data, val_loader_->targets().data(), mb_->targets.nbytes());
    mb_->training = false;
    sum += model_->forward(*mb_);
  }
  return mean_over_ranks(static_cast<float>(sum / n));
}

size_t Trainer::memory_bytes() const {
  return model_->store().total_bytes() + mb_->saved.peak() + mb_->workspace.peak();
}

std::string Trainer::save(const std::string& name) const {
  const fs::path dir(cfg_.out_dir);
  fs::create_directories(dir);
  CheckpointInfo info;
  info.config = model_->config();
  info.step = step_;
  if (!tokenizer_path_.empty() && fs::exists(tokenizer_path_)) {
    fs::copy_file(tokenizer_path_, dir / "tokenizer.json", fs::copy_options::overwrite_existing);
    info.tokenizer = "tokenizer.json";
  }
  info.extra = {{"config", config_to_json(cfg_)}};
  const std::string path = (dir / name).string();
  save_checkpoint(path, *model_, info);
  return path;
}

void Trainer::run() {
  const bool rank0 = world_->rank() == 0;
  const bool tty = isatty(STDOUT_FILENO) && cfg_.progress;
  std::ofstream metrics;
  if (rank0) {
    fs::create_directories(cfg_.out_dir);
    std::ofstream(fs::path(cfg_.out_dir) / "config.json") << config_to_json(cfg_).dump(2) << "\n";
    metrics.open(fs::path(cfg_.out_dir) / "metrics.jsonl");
    const size_t act = mb_->saved.capacity() + mb_->workspace.capacity();
    fmt::print(
        "tide: model {} | {} DP rank(s) | micro-batch {} x {} tokens, accum {} | "
        "activations: {}\n",
        cfg_.model.str(), world_->size(), cfg_.micro_batch, cfg_.seq_len, cfg_.grad_accum,
        activation_policy_name(cfg_.activation_policy));
    fmt::print(
        "tide: data {} ({} tokens){} | chunks: {} x {:.2f} MiB | memory: {:.1f} MiB model "
        "states + {:.1f} MiB activations\n",
        cfg_.train_data, train_loader_->num_tokens(),
        unigram_ ? fmt::format(", unigram baseline {:.3f} nats", *unigram_) : "",
        model_->store().layout().num_chunks(),
        model_->store().layout().chunk_elems() * 4 / 1048576.0,
        model_->store().total_bytes() / 1048576.0, act / 1048576.0);
    std::fflush(stdout);
  }
  auto log_eval = [&](float val) {
    if (!rank0) return;
    metrics << json{{"step", step_}, {"val_loss", val}}.dump() << "\n" << std::flush;
    if (tty) fmt::print("\n");
    fmt::print("step {:>6} | val loss {:.4f}{}\n", step_, val,
               unigram_ ? fmt::format(" (unigram baseline {:.4f})", *unigram_) : "");
    std::fflush(stdout);
  };
  if (val_loader_) log_eval(evaluate());

  const auto t_start = Clock::now();
  int64_t tokens_done = 0;
  while (step_ < cfg_.train_steps) {
    const StepStats st = train_step();
    tokens_done += st.tokens;
    if (rank0) {
      const double elapsed = seconds_since(t_start);
      const double tok_s = tokens_done / elapsed;
      const double eta = elapsed / step_ * (cfg_.train_steps - step_);
      const std::string line = fmt::format(
          "step {:>6}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.0f} tok/s | mem {:.0f} MiB | "
          "ETA {}",
          step_, cfg_.train_steps, st.loss, st.lr, st.grad_norm, tok_s, memory_bytes() / 1048576.0,
          human_duration(eta));
      if (step_ % cfg_.log_interval == 0 || step_ == cfg_.train_steps) {
        metrics << json{{"step", step_},
                        {"loss", st.loss},
                        {"lr", st.lr},
                        {"grad_norm", st.grad_norm},
                        {"step_seconds", st.seconds},
                        {"comm_wait_seconds", st.comm_seconds},
                        {"tokens_per_s", tok_s}}
                       .dump()
                << "\n"
                << std::flush;
        if (!tty) fmt::print("{}\n", line);
      }
      if (tty) fmt::print("\r{}   ", line);
      std::fflush(stdout);
    }
    const bool eval_now = cfg_.eval_interval > 0 && step_ % cfg_.eval_interval == 0;
    if (val_loader_ && (eval_now || step_ == cfg_.train_steps)) log_eval(evaluate());
    if (rank0 && cfg_.checkpoint_interval > 0 && step_ % cfg_.checkpoint_interval == 0 &&
        step_ < cfg_.train_steps)
      save(fmt::format("model_step{}.ckpt", step_));
  }
  if (rank0) {
    const std::string path = save();
    fmt::print("tide: trained {} steps in {}; checkpoint {}\n", step_,
               human_duration(seconds_since(t_start)), path);
    fmt::print("tide: try `tide sample --checkpoint {}`\n", path);
  }
}

}  // namespace tide
