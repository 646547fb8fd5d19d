#include "tide/train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tide/checkpoint/auto_resume.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/init_from.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/checkpoint/tp_checkpoint.h"
#include "tide/comm/device_routed_group.h"
#include "tide/comm/distributed.h"
#include "tide/comm/local_process_group.h"
#include "tide/comm/nccl_process_group.h"
#include "tide/comm/sim_collective_group.h"
#include "tide/config/estimate_setup.h"
#include "tide/config/rank_consistency.h"
#include "tide/config/unsupported_settings.h"
#include "tide/core/byte_size.h"
#include "tide/data/prepare.h"
#include "tide/estimate/memory_estimate.h"
#include "tide/model/host_twin.h"
#include "tide/model/layout.h"
#include "tide/train/preemption.h"

namespace tide {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// ZeRO-Offload's counters of the step (offload_policy.h): in metrics.jsonl, and in short on the
// progress line.
void add_offload_metrics(json& record, const OffloadStepCounters& o) {
  record["offload_bytes_to_host"] = o.bytes_to_host;
  record["offload_bytes_to_device"] = o.bytes_to_compute;
  record["offload_moves"] = o.moves_to_host + o.moves_to_compute;
  record["offload_wait_seconds"] = o.wait_seconds;
  record["offload_copy_seconds"] = o.copy_seconds;
  record["offload_adam_seconds"] = o.adam_seconds;
  record["offload_hidden_seconds"] = o.hidden_seconds;
}
// placement.policy=auto's counters of the step (auto_placement.h), the same way.
void add_placement_metrics(json& record, const PlacementStepCounters& p) {
  record["placement_bytes_to_host"] = p.bytes_to_host;
  record["placement_bytes_to_device"] = p.bytes_to_compute;
  record["placement_moves"] = p.moves_to_host + p.moves_to_compute;
  record["placement_evictions"] = p.evictions;
  record["placement_wait_seconds"] = p.wait_seconds;
  record["placement_updated_on_device"] = p.updated_on_compute;
  record["placement_updated_on_host"] = p.updated_on_host;
}
std::string placement_progress(const PlacementStepCounters& p) {
  return fmt::format(" | auto {:.1f}+{:.1f} MiB, {} evictions, wait {:.3f} s, adam {}/{} on dev",
                     p.bytes_to_host / 1048576.0, p.bytes_to_compute / 1048576.0, p.evictions,
                     p.wait_seconds, p.updated_on_compute,
                     p.updated_on_compute + p.updated_on_host);
}
std::string offload_progress(const OffloadStepCounters& o) {
  return fmt::format(" | offload {:.1f}+{:.1f} MiB, wait {:.3f} s", o.bytes_to_host / 1048576.0,
                     o.bytes_to_compute / 1048576.0, o.wait_seconds);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Wall-clock time of a metrics record: Unix seconds (UTC), to the millisecond.
double unix_seconds() {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  return static_cast<double>(ms.count()) / 1000.0;
}

std::string human_duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600)
    return fmt::format("{}m{:02d}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return fmt::format("{}h{:02d}m", static_cast<int>(s) / 3600, static_cast<int>(s) % 3600 / 60);
}

// Where the embedded default corpus goes (prepared once, reused by later runs).
constexpr const char* kDefaultDataDir = "data/fortunes";

// Writes `text` to a temporary file beside `path` and renames it over `path`: a reader (or a
// full disk) never sees a half-written file, and a failed write leaves the old one in place.
void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp{}", path, ::getpid());
  std::ofstream f(tmp, std::ios::trunc);
  f << text;
  f.close();
  std::error_code ec;
  if (!f) {
    fs::remove(tmp, ec);
    TIDE_FAIL("{}: cannot write it (disk full or not writable?); nothing was changed", path);
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    TIDE_FAIL("{}: cannot replace it ({}); check the directory's permissions", path, ec.message());
  }
}

// Creates the directory `path` goes in (trace.path), naming the key when it cannot.
void create_parent_directory(const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  TIDE_CHECK(!ec && fs::is_directory(dir),
             "trace.path '{}': cannot create its directory ({}); choose a writable path", path,
             ec ? ec.message() : "not a directory");
}

// One metrics line, flushed; a failed write (a full disk) stops the run instead of losing lines.
void write_metrics_line(std::ofstream& f, const std::string& path, const json& line) {
  f << line.dump() << "\n" << std::flush;
  TIDE_CHECK(f.good(),
             "{}: writing a metrics line failed (disk full?); free space, then continue the run "
             "from its last checkpoint with checkpoint.resume",
             path);
}

// Rank `root`'s `text` on every rank of `g` (collective): the length, then the bytes as int32
// words.
void broadcast_text(ProcessGroup& g, std::string& text, int root) {
  if (g.size() == 1) return;
  int64_t len = static_cast<int64_t>(text.size());
  g.broadcast(Tensor(&len, Shape{2}, DType::I32), root);
  std::vector<int32_t> words((len + 3) / 4, 0);
  std::memcpy(words.data(), text.data(), g.rank() == root ? text.size() : 0);
  if (!words.empty())
    g.broadcast(Tensor(words.data(), Shape{static_cast<int64_t>(words.size())}, DType::I32), root);
  text.assign(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(len));
}

// metrics.jsonl of a run resumed at `step`: the lines of steps after it (logged by the attempt
// that was cut off, and about to be taken again) and a line torn by a kill are dropped, and a
// line marks the resume, so every step is logged once, by the run that continues.
void rewind_metrics(const std::string& path, int64_t step, const std::string& checkpoint) {
  std::ifstream in(path);
  std::string kept, line;
  while (std::getline(in, line)) {
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("step", int64_t{0}) <= step) kept += line + "\n";
  }
  kept +=
      json{
          {"event", "resume"}, {"step", step}, {"checkpoint", checkpoint}, {"time", unix_seconds()}}
          .dump() +
      "\n";
  write_file_atomically(path, kept);
}

json loss_scaler_json(const LossScalerState& s) {
  return {{"scale", s.scale},
          {"iter", s.iter},
          {"last_overflow_iter", s.last_overflow_iter},
          {"hysteresis", s.hysteresis},
          {"skipped", s.skipped}};
}

LossScalerState loss_scaler_state(const json& j, const std::string& path) {
  auto number = [&](const char* key) -> const json& {
    TIDE_CHECK(j.is_object() && j.contains(key) && j[key].is_number(),
               "checkpoint '{}': run.loss_scaler has no number '{}'; the file is damaged", path,
               key);
    return j[key];
  };
  LossScalerState s;
  s.scale = number("scale").get<double>();
  s.iter = number("iter").get<int64_t>();
  s.last_overflow_iter = number("last_overflow_iter").get<int64_t>();
  s.hysteresis = number("hysteresis").get<int>();
  s.skipped = number("skipped").get<int64_t>();
  TIDE_CHECK(std::isfinite(s.scale) && s.scale > 0 && s.iter >= 0 && s.last_overflow_iter >= -1 &&
                 s.last_overflow_iter < s.iter && s.hysteresis >= 1 && s.skipped >= 0 &&
                 s.skipped <= s.iter,
             "checkpoint '{}': run.loss_scaler {} is not a loss scaler's state; the file is "
             "damaged",
             path, j.dump());
  return s;
}

}  // namespace

Trainer::Trainer(TrainConfig config, std::shared_ptr<ProcessGroup> world)
    : cfg_(std::move(config)),
      world_(std::move(world)),
      progress_(ProgressLine::for_stdout(cfg_.progress)) {
  if (!world_) world_ = std::make_shared<LocalProcessGroup>();
  // Reliability (docs/reliability.md): the watchdog's limit, then the ranks compare their
  // configs before any other collective.
  world_->set_timeout(cfg_.comm_timeout_s);
  check_ranks_agree(*world_, config_agreement_items(cfg_));
  // The checks before anything is built, in two rounds that each rank makes alone and the
  // ranks then compare (agree_on_errors): an error they all hit (a resume checkpoint that
  // cannot continue this run, a batch size that does not add up) is one line and exit code 1
  // on every rank, not a line per rank and MPI_Abort. Nothing inside may talk to other ranks,
  // so the default corpus's preparation (rank 0 prepares, the others wait) sits between the
  // rounds and the tp mesh comes after them.
  if (cfg_.resume == "auto") resolve_auto_resume();  // collective: before the checks below
  // A plain struct and a flag, not std::optional: GCC 12 at -O2 warned (-Wmaybe-uninitialized)
  // on reading the optional's members after it was set inside the lambda below.
  RunPosition resume_at;
  const bool resuming = !cfg_.resume.empty();
  // On a GPU, rank r of a machine takes its GPU r (comm/distributed.h): collective, so here.
  const NodeRank node = on_device(cfg_) && world_->size() > 1 ? node_rank(*world_) : NodeRank{};
  Device device = Device::cpu();
  agree_on_errors(*world_, [&] {
    check_trainer_can_honour(cfg_, world_->size());  // nothing the schema takes is dropped
    if (on_device(cfg_)) device = device_of_rank(cfg_.device, node);
    if (device.is_cuda() && world_->size() > 1)
      TIDE_CHECK(device.index < cuda_device_count(),
                 "device={}: this rank is rank {} of the {} on its machine, which shows {} "
                 "GPU(s); launch at most one rank per GPU on each machine",
                 cfg_.device, node.rank, node.size, cuda_device_count());
    const int dp = data_parallel_ranks();
    if (cfg_.train_batch_size > 0)
      TIDE_CHECK(cfg_.train_batch_size == int64_t{cfg_.micro_batch} * cfg_.grad_accum * dp,
                 "train_batch_size {} != train_micro_batch_size_per_gpu {} x "
                 "gradient_accumulation_steps {} x data-parallel ranks {}; fix one of them (or "
                 "set train_batch_size to 0)",
                 cfg_.train_batch_size, cfg_.micro_batch, cfg_.grad_accum, dp);
    // A checkpoint to resume from is checked (whole file, and that it can continue this run)
    // before anything is prepared or written.
    if (resuming) resume_at = check_resume(cfg_.resume);
  });
  if (cfg_.threads > 0) omp_set_num_threads(cfg_.threads);
  // A device (the simulated one, whose stream's CPU kernels use this rank's threads, or a GPU):
  // the model's ops run on its stream, its memory holds the model (configure_store).
  if (on_device(cfg_)) op_ = make_op_context(device, nullptr, omp_get_max_threads());
  prepare_default_corpus();
  // init_from (ignored when resuming: the run's own checkpoint wins): checked whole, shape
  // included, before the model is built or anything is written to out_dir.
  // A Hugging Face folder is imported into a temporary checkpoint here, freed once loaded.
  const bool init_from = !resuming && !cfg_.init_from.empty();
  std::unique_ptr<InitFromCheckpoint> init_source;
  agree_on_errors(*world_, [&] {
    resolve_data();
    if (!init_from) return;
    init_source = std::make_unique<InitFromCheckpoint>(cfg_.init_from);
    check_init_from(init_source->path(), cfg_.model);
  });
  // The world as the pp x dp x tp mesh (Megatron order, tp fastest: the ranks of a replica are
  // contiguous; an axis of size 1 is a local group, comm/topology.h). Collective, so built
  // before anything else talks.
  mesh_ = std::make_unique<Topology>(mesh_world(), mesh_shape());

  OptimizerSettings opt;
  opt.adamw.beta1 = cfg_.beta1;
  opt.adamw.beta2 = cfg_.beta2;
  opt.adamw.eps = cfg_.eps;
  opt.adamw.weight_decay = cfg_.weight_decay;
  opt.adamw.decoupled = cfg_.adam_w_mode;  // false: DeepSpeed's Adam with adam_w_mode false
  opt.lr = cfg_.lr_schedule;
  opt.grad_clip = cfg_.grad_clip;
  opt.fp16 = cfg_.fp16_loss_scale;  // used when fp16.enabled (the store computes in f16)
  // Second round, now that the data is open: the same data and model on every rank (under pp
  // the stages hold different tensors: the whole model's layout is compared).
  auto check_same_data_and_layout = [&](const ChunkLayout& layout) {
    check_ranks_agree(
        *world_, {{"data.train (contents)", data_fingerprint(train_loader_->files())},
                  {"data.val (contents)", val_loader_ ? data_fingerprint(val_loader_->files()) : 0},
                  {"model.vocab_size (resolved)", static_cast<uint64_t>(cfg_.model.vocab_size)},
                  {"model layout", layout_fingerprint(layout)}});
  };
  // The whole model's layout is compared (the stages and tp ranks hold different parts).
  check_same_data_and_layout(make_layout(cfg_.model));
  StoreOptions so;
  configure_store(so);
  try {
    runner_ = std::make_unique<StepRunner>(cfg_, *mesh_, opt, so, auto_placement_settings(), op_,
                                           op_.device.is_cpu() ? nullptr : compute_alloc_.get());
  } catch (const OutOfBudget& e) {
    // On a device the micro-batches' arenas are reserved from the budget here, before anything
    // is written.
    if (cfg_.placement_policy != "auto") throw;
    throw Error(
        fmt::format("{}\ntide: placement.policy=auto: placement.device_memory_limit does "
                    "not hold the run's arenas; refused before anything was written to "
                    "out_dir '{}'{}",
                    e.what(), cfg_.out_dir, least_limit_hint()));
  }
  if (init_from) runner_->init_from(init_source->path());  // before the engine reads them
  if (resuming) {
    // Any checkpoint into any layout: by tensor name and element range (checkpoint_source.h).
    runner_->load(cfg_.resume);
    step_ = resume_at.step;
    train_loader_->seek(resume_at.data_epoch, resume_at.data_batch);
    if (resume_at.loss_scaler) runner_->loss_scaler().restore(*resume_at.loss_scaler);
  }
  if (cfg_.trace_steps > 0) {
    tracer_ = std::make_unique<Tracer>(world_->rank());
    first_traced_ = step_ + 2;  // step_ + 1 is the warm-up
  }
}

Trainer::~Trainer() = default;

std::shared_ptr<ProcessGroup> Trainer::mesh_world() const {
  if (op_.device.is_cpu() || world_->size() == 1) return world_;
  // Device buffers through the device's collectives, ordered by its streams (NCCL on a GPU, its
  // stand-in on the simulated device); host buffers through world_ (device_routed_group.h).
  DeviceGroupFactory device_group;
  if (op_.device.is_sim())
    device_group = [sim = op_.sim](std::shared_ptr<ProcessGroup> bootstrap) {
      return std::make_shared<SimCollectiveGroup>(std::move(bootstrap), sim);
    };
  else
    device_group = [gpu = op_.device.index,
                    stream = op_.stream](std::shared_ptr<ProcessGroup> bootstrap) {
      return make_nccl_process_group(std::move(bootstrap), gpu, stream);
    };
  return std::make_shared<DeviceRoutedGroup>(world_, device_group);
}

AutoPlacementSettings Trainer::auto_placement_settings() const {
  return cfg_.placement_policy == "auto"
             ? AutoPlacementSettings{compute_alloc_.get(), host_alloc_.get()}
             : AutoPlacementSettings{};
}

void Trainer::configure_store(StoreOptions& so) {
  // bf16/fp16: PARAM in 16 bits, GRAD in the gradients' dtype (data_types.grad_accum_dtype or
  // DeepSpeed's default for it); MASTER and Adam f32.
  so.compute_dtype = model_dtype(cfg_);
  if (grad_dtype(cfg_) != so.compute_dtype) so.grad_dtype = grad_dtype(cfg_);
  const bool offload = cfg_.zero.offload_optimizer.enabled;
  auto limit = static_cast<size_t>(cfg_.device_memory_limit);
  if (op_.device.is_cuda() && cfg_.placement_policy == "auto" && limit == 0) {
    // auto's budget on a GPU: its free memory now, less a margin (memory/allocator.h).
    const DeviceMemoryInfo m = cuda_memory_info(op_.device);
    limit = static_cast<size_t>(default_auto_device_limit(m));
    if (world_->rank() == 0)
      fmt::print(
          "tide: placement.policy=auto on {}: device budget {:.2f} GiB ({:.2f} GiB free "
          "of {:.2f} GiB, less a {:.2f} GiB margin; placement.device_memory_limit sets "
          "it)\n",
          op_.device.str(), limit / double(1 << 30), m.free_bytes / double(1 << 30),
          m.total_bytes / double(1 << 30),
          (m.free_bytes - static_cast<int64_t>(limit)) / double(1 << 30));
  }
  if (!op_.device.is_cpu()) {  // the device's memory (with a limit: placement's budget)
    compute_alloc_ = op_.device.is_sim() ? std::make_unique<SimAllocator>(op_.device, limit)
                                         : make_cuda_allocator(op_.device, limit);
  } else {
    if (limit == 0 && !offload) return;
    // On a CPU-only machine the device is a budgeted host allocator (memory/allocator.h).
    compute_alloc_ = std::make_unique<BudgetedAllocator>(limit);
  }
  so.compute = so.optimizer = compute_alloc_.get();
  if (cfg_.placement_policy == "auto") {
    // PatrickStar (auto_placement.h): the placement allocates every chunk, on the budgeted
    // compute tier while it fits and on the host (page-locked with placement.pin_memory) after,
    // and moves them between the two on demand.
    host_alloc_ =
        make_host_allocator(op_.device, cfg_.placement_pin_memory, "placement.pin_memory");
    so.compute = so.optimizer = host_alloc_.get();
    for (ChunkKind k : {ChunkKind::PARAM, ChunkKind::GRAD, ChunkKind::MASTER, ChunkKind::ADAM_M,
                        ChunkKind::ADAM_V})
      so.placed_kinds |= kind_bit(k);
    return;
  }
  if (!offload) return;
  // ZeRO-Offload: fp32 master weights (their own copy, also in f32) and Adam m, v on the host.
  // Only what a copy reads or writes is page-locked (the pin_memory keys): an f32 master goes
  // up as the parameters (16-bit parameters go up from the OffloadPolicy's staging slices).
  host_alloc_ = std::make_unique<HostAllocator>();
  so.optimizer = host_alloc_.get();
  so.separate_master = true;
  if (so.compute_dtype == DType::F32) {
    master_alloc_ = make_host_allocator(op_.device, cfg_.zero.offload_optimizer.pin_memory,
                                        "zero_optimization.offload_optimizer.pin_memory");
    so.master = master_alloc_.get();
  }
  // offload_param (stage 3): this rank's parameter slices on the host too; the ZeRO-3 gathers
  // bring each block's chunks into the compute tier on use (prefetched ahead) and free them.
  if (cfg_.offload_param == "cpu") {
    param_slices_alloc_ = make_host_allocator(op_.device, cfg_.offload_param_pin_memory,
                                              "zero_optimization.offload_param.pin_memory");
    so.param_slices = param_slices_alloc_.get();
  }
}

void Trainer::prepare_default_corpus() {
  if (!cfg_.is_default_run) return;
  cfg_.data_dir = kDefaultDataDir;
  if (prepared_corpus_exists(cfg_.data_dir)) return;
  if (world_->rank() == 0) {
    fmt::print("tide: preparing the default corpus (Debian fortunes) into {} ...\n", cfg_.data_dir);
    prepare_corpus(default_corpus_options(cfg_.data_dir));
  }
  world_->barrier_async()->wait();
}

void Trainer::resolve_data() {
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
    // config.json records what the run used (a path only where it exists, as the config
    // requires of a path it is given).
    set_resolved_value(cfg_, "data.dir", cfg_.data_dir);
    set_resolved_value(cfg_, "data.train", cfg_.train_data);
    if (fs::exists(cfg_.val_data)) set_resolved_value(cfg_, "data.val", cfg_.val_data);
    set_resolved_value(cfg_, "model.vocab_size", cfg_.model.vocab_size);
  }
  TIDE_CHECK(!cfg_.train_data.empty(),
             "no training data: set data.dir (from `tide prepare`) or data.train");
  TIDE_CHECK(cfg_.model.vocab_size > 0,
             "model.vocab_size is unknown: set it, or use a data.dir whose meta.json gives it");
  // Under pp every stage of replica d reads the global batch as data-parallel rank d would.
  const int dp = data_parallel_ranks(), rank = data_parallel_rank();
  train_loader_ =
      std::make_unique<DataLoader>(expand_shard_paths({cfg_.train_data}), cfg_.micro_batch,
                                   cfg_.seq_len, rank, dp, cfg_.seed, cfg_.shuffle);
  train_loader_->check_vocab(cfg_.model.vocab_size);
  if (!cfg_.val_data.empty() && fs::exists(cfg_.val_data)) {
    // Batch index i of this loader is sequence i of the validation set, on every rank.
    val_loader_ = std::make_unique<DataLoader>(expand_shard_paths({cfg_.val_data}), 1, cfg_.seq_len,
                                               0, 1, cfg_.seed, false);
    val_loader_->check_vocab(cfg_.model.vocab_size);
  }
}

Tracer* Trainer::step_tracer() const {
  const int64_t next = step_ + 1;
  return tracer_ && next >= first_traced_ && next < first_traced_ + cfg_.trace_steps ? tracer_.get()
                                                                                     : nullptr;
}

StepStats Trainer::train_step() {
  world_->set_step(step_ + 1);  // named by the watchdog
  Tracer* tracer = step_tracer();
  StepStats st;
  {
    const TraceSpan span(tracer, "step", "step", {{"step", step_ + 1}});
    PipelineEngine::BatchFn batch = [&](int micro, int32_t* in, int32_t* tgt) {
      batch_source(step_, micro, in, tgt);
    };
    if (!batch_source) {
      // The executor asks for a micro-batch once per model chunk, in schedule order: read the
      // step's micro-batches first (on every stage, so that every rank's loader position is
      // the run's), keep them where a chunk needs tokens or targets.
      const size_t n = static_cast<size_t>(cfg_.micro_batch) * cfg_.seq_len;
      const bool keep = runner_->needs_data();
      step_inputs_.assign(keep ? n * cfg_.grad_accum : 0, 0);
      step_targets_.assign(keep ? n * cfg_.grad_accum : 0, 0);
      for (int k = 0; k < cfg_.grad_accum; ++k) {
        train_loader_->next_batch();
        if (!keep) continue;
        std::memcpy(step_inputs_.data() + k * n, train_loader_->inputs().data(), n * 4);
        std::memcpy(step_targets_.data() + k * n, train_loader_->targets().data(), n * 4);
      }
      batch = [&, n, keep](int micro, int32_t* in, int32_t* tgt) {
        if (!keep) return;  // a middle stage reads neither
        std::memcpy(in, step_inputs_.data() + micro * n, n * 4);
        std::memcpy(tgt, step_targets_.data() + micro * n, n * 4);
      };
    }
    st = runner_->step(step_, cfg_.seed, batch, tracer);
    // The mean loss over the data-parallel ranks, and whether any rank was asked to stop
    // (preemption.h): one all-reduce, so all ranks stop after the same step. (The pipeline's
    // stages all hold the same loss already: only the flag is summed.)
    float reduced[2] = {st.loss, stop_requested() ? 1.0f : 0.0f};
    if (world_->size() > 1) {
      const TraceSpan loss_span(tracer, "all-reduce loss", "comm");
      ProcessGroup& replicas = mesh_->dp();
      if (replicas.size() < world_->size()) {
        // The replicas' mean (each replica's stages / tp ranks hold its loss already), then
        // the flag.
        if (replicas.size() > 1)
          replicas.all_reduce_async(Tensor(reduced, Shape{1}), ReduceOp::Avg)->wait();
        world_->all_reduce_async(Tensor(reduced + 1, Shape{1}), ReduceOp::Sum)->wait();
      } else {  // every rank a replica: both in one all-reduce (a flag's mean > 0 is any flag)
        world_->all_reduce_async(Tensor(reduced, Shape{2}), ReduceOp::Avg)->wait();
      }
    }
    st.loss = reduced[0];
    stop_agreed_ = reduced[1] > 0;
  }
  st.tokens = int64_t{cfg_.micro_batch} * cfg_.seq_len * cfg_.grad_accum * data_parallel_ranks();
  step_ = st.step;
  if (tracer && step_ == first_traced_ + cfg_.trace_steps - 1) write_trace();
  return st;
}

namespace {
// How the run splits the world, for the start line: "4 DP rank(s)", "2 tensor-parallel ranks x
// 2 DP replica(s) (ZeRO-1)" or "2 pipeline stages x 2 data-parallel replicas (ZeRO-1), schedule
// 1f1b".
std::string parallelism_line(const TrainConfig& c, const MeshShape& m) {
  const char* sp = c.sequence_parallel ? " (sequence parallel)" : "";
  if (m.pp == 1)
    return m.tp > 1 ? fmt::format("{} tensor-parallel ranks{} x {} DP replica(s) (ZeRO-{})", m.tp,
                                  sp, m.dp, c.zero.stage)
                    : fmt::format("{} DP rank(s)", m.size());
  std::string s = fmt::format("{} pipeline stages", m.pp);
  if (m.tp > 1) s += fmt::format(" x {} tensor-parallel ranks{}", m.tp, sp);
  if (m.dp > 1) s += fmt::format(" x {} data-parallel replicas (ZeRO-{})", m.dp, c.zero.stage);
  s += fmt::format(", schedule {}", c.pipeline_schedule);
  if (c.virtual_stages > 1) s += fmt::format(" ({} chunks per stage)", c.virtual_stages);
  return s;
}

// Every rank's `text`, on every rank (collective): the lengths first, then the texts padded to
// the longest, as int32 words.
std::vector<std::string> gather_text(ProcessGroup& g, const std::string& text) {
  if (g.size() == 1) return {text};
  const int n = g.size();
  int64_t len = static_cast<int64_t>(text.size());
  std::vector<int64_t> lens(n);
  g.all_gather(Tensor(&len, Shape{2}, DType::I32), Tensor(lens.data(), Shape{2 * n}, DType::I32));
  const int64_t words = (*std::max_element(lens.begin(), lens.end()) + 3) / 4;
  std::vector<int32_t> mine(words, 0), all(words * n);
  std::memcpy(mine.data(), text.data(), text.size());
  g.all_gather(Tensor(mine.data(), Shape{words}, DType::I32),
               Tensor(all.data(), Shape{words * n}, DType::I32));
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data() + r * words), lens[r]);
  return out;
}
}  // namespace

std::string Trainer::trace_file() const {
  return cfg_.trace_path.empty() ? (fs::path(cfg_.out_dir) / "trace.json").string()
                                 : cfg_.trace_path;
}

void Trainer::write_trace() {
  if (!tracer_) return;
  const int rank = world_->rank();
  const std::vector<LaneName> process = {{rank, 0, fmt::format("rank {}", rank)}};
  const std::vector<std::string> parts = gather_text(
      *world_, chrome_trace_events_json(tracer_->events(), tracer_->lane_names(), process));
  const int64_t last = std::min(step_, first_traced_ + cfg_.trace_steps - 1);
  tracer_.reset();  // traced once per run
  if (rank != 0 || last < first_traced_) return;
  const std::string path = trace_file();
  create_parent_directory(path);
  write_file_atomically(path, chrome_trace_file(parts));
  progress_.print(
      fmt::format("tide: trace of step{} {} written to {} (open it in https://ui.perfetto.dev)",
                  last > first_traced_ ? "s" : "",
                  last > first_traced_ ? fmt::format("{}-{}", first_traced_, last)
                                       : fmt::format("{}", first_traced_),
                  path));
}

void Trainer::write_metrics(std::ofstream& f, const std::string& path, const json& line) {
  write_metrics_line(f, path, line);
  if (tensorboard_) tensorboard_->add_metrics(line);
}

float Trainer::evaluate() {
  if (!val_loader_) return NAN;
  const int64_t n =
      std::min<int64_t>(cfg_.eval_sequences, static_cast<int64_t>(val_loader_->num_sequences()));
  return runner_->evaluate(*val_loader_, n);
}

size_t Trainer::host_tier_bytes() const {
  size_t b = 0;
  for (const auto* a : {host_alloc_.get(), master_alloc_.get(), param_slices_alloc_.get()})
    if (a) b += a->allocated();
  return b;
}

size_t Trainer::memory_bytes() const {
  size_t b = runner_->model_state_bytes() + runner_->activation_bytes();
  // Host memory the executor holds besides the model states and activations.
  const PipelineEngine& e = runner_->engine();
  b += e.host_checkpoint_bytes();  // cpu_checkpointing's pool
  if (const Allocator* a = e.offload_grad_allocator()) b += a->allocated();
  return b;
}

std::string Trainer::save(const std::string& name) const {
  // ZeRO-Offload's delayed update: the checkpoint holds every step taken (the run goes on
  // from there as a run resumed from it does, with no update in flight).
  runner_->flush_update();
  const fs::path dir(cfg_.out_dir);
  const bool rank0 = world_->rank() == 0;
  const std::string path = (dir / name).string();
  if (!rank0 && !runner_->save_is_collective()) return path;  // rank 0 holds everything, writes
  fs::create_directories(dir);
  CheckpointInfo info;
  info.config = cfg_.model;
  info.step = step_;
  // The tokenizer goes next to the checkpoint (a relative path: to the folder holding it).
  if (!tokenizer_path_.empty() && fs::exists(tokenizer_path_)) {
    if (rank0)
      fs::copy_file(tokenizer_path_, dir / "tokenizer.json", fs::copy_options::overwrite_existing);
    info.tokenizer = "tokenizer.json";
  }
  // Everything a step needs besides the tensors. Dropout masks and the data order are pure
  // functions of (seed, step) and (seed, epoch), so the run position is their whole RNG state.
  info.extra = {
      {"config", config_to_json(cfg_)},
      {"run",
       {{"step", step_},
        {"seed", cfg_.seed},
        {"global_batch", int64_t{cfg_.micro_batch} * cfg_.grad_accum * data_parallel_ranks()},
        {"data_epoch", train_loader_->epoch()},
        {"data_batch", train_loader_->next_batch_index()},
        {"loss_scaler", loss_scaler_json(runner_->loss_scaler().state())},
        // data_batch counts the loader's batches of this many sequences (ranks x micro-batch)
        {"data_batch_sequences", int64_t{data_parallel_ranks()} * cfg_.micro_batch}}}};
  runner_->save(path, info);
  return path;
}

void Trainer::resolve_auto_resume() {
  // Rank 0 looks (the ranks may not share one view of a file system being written) and every
  // rank takes its choice.
  std::string path;
  if (world_->rank() == 0) {
    const AutoResume found = find_auto_resume(cfg_.out_dir);
    for (const std::string& s : found.skipped)
      fmt::print(stderr, "tide: warning: checkpoint.resume=auto skips {}\n", s);
    if (found.path.empty())
      fmt::print("tide: checkpoint.resume=auto: no complete checkpoint in {}; starting at step 0\n",
                 cfg_.out_dir);
    else
      fmt::print("tide: checkpoint.resume=auto: the newest complete checkpoint is {} (step {})\n",
                 found.path, found.step);
    std::fflush(stdout);
    path = found.path;
  }
  broadcast_text(*world_, path, 0);
  cfg_.resume = path;
}

void Trainer::check_same_lr_schedule(const std::string& path, const CheckpointInfo& info,
                                     int64_t step) const {
  // The schedule is a pure function of the step (lr_schedule.h): the checkpoint's, rebuilt from
  // the config it stored, must be this run's, or the lr jumps at the resumed step (e.g. a
  // cosine over train_steps, raised on resume).
  if (cfg_.new_lr_schedule || !info.extra.is_object() || !info.extra.contains("config")) return;
  LrSchedule theirs;
  try {
    // Its model keys are resolved already: its init_from source is not read (it may be gone).
    nlohmann::json stored = info.extra["config"];
    if (stored.is_object()) stored.erase("init_from");
    theirs = parse_train_config(stored, /*check_paths=*/false).lr_schedule;
  } catch (const Error&) {
    return;  // a config another tide version wrote: its schedule is not compared
  }
  if (theirs == cfg_.lr_schedule) return;
  // Differently configured, but the same lr at every step this run trains: no jump.
  int64_t differ = -1;
  for (int64_t s = step; s < cfg_.train_steps && differ < 0; ++s)
    if (lr_at(s, cfg_.lr_schedule) != lr_at(s, theirs)) differ = s;
  if (differ < 0) return;
  const json mine = config_to_json(cfg_), &stored = info.extra["config"];
  std::string changed;
  for (std::string key :
       {"train_steps", "optimizer.params.lr", "scheduler.type", "scheduler.params.warmup_min_lr",
        "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps",
        "scheduler.params.warmup_type", "scheduler.params.total_num_steps",
        "scheduler.params.cos_min_ratio", "scheduler.params.warmup_min_ratio"}) {
    std::string pointer = "/" + key;
    std::ranges::replace(pointer, '.', '/');
    const json::json_pointer at(pointer);
    const json old = stored.contains(at) ? stored[at] : json();
    if (old != mine[at])
      changed += fmt::format("{}{} {} -> {}", changed.empty() ? "" : ", ", key, old.dump(),
                             mine[at].dump());
  }
  TIDE_FAIL(
      "checkpoint '{}' was trained with another learning-rate schedule than this run's ({}): "
      "step {} would run at lr {:.3e}, where the checkpoint's schedule gives {:.3e}. Resume with "
      "the checkpoint's values to continue its schedule (to train past its end, keep "
      "scheduler.params.total_num_steps={}: the schedule then stays at its last value), or set "
      "checkpoint.new_lr_schedule=true to take this run's schedule from step {} on",
      path, changed, differ + 1, lr_at(differ, cfg_.lr_schedule), lr_at(differ, theirs),
      theirs.total_num_steps, step + 1);
}

Trainer::RunPosition Trainer::check_resume(const std::string& path) const {
  const bool sharded = is_sharded_checkpoint(path);
  const CheckpointInfo info =
      sharded ? read_sharded_checkpoint_info(path).info : read_checkpoint_info(path);
  const json& run =
      info.extra.is_object() && info.extra.contains("run") ? info.extra["run"] : json();
  auto field = [&](const char* key) -> int64_t {
    TIDE_CHECK(run.is_object() && run.contains(key) && run[key].is_number_integer() &&
                   run[key].get<int64_t>() >= 0,
               "checkpoint '{}' has no run position ('{}'): it can initialise a model but not "
               "resume a run",
               path, key);
    return run[key].get<int64_t>();
  };
  const int64_t global_batch = int64_t{cfg_.micro_batch} * cfg_.grad_accum * data_parallel_ranks();
  TIDE_CHECK(field("global_batch") == global_batch,
             "checkpoint '{}' was trained with a global batch of {} sequences, this run has {}; "
             "resume with the same train_micro_batch_size_per_gpu x gradient_accumulation_steps x "
             "ranks",
             path, field("global_batch"), global_batch);
  TIDE_CHECK(static_cast<uint64_t>(field("seed")) == cfg_.seed,
             "checkpoint '{}' was trained with seed {}, this run has {}; resume with the same seed "
             "(it fixes the data order and dropout)",
             path, field("seed"), cfg_.seed);
  check_same_lr_schedule(path, info, field("step"));
  TIDE_CHECK(field("step") <= cfg_.train_steps,
             "checkpoint '{}' is at step {}, past train_steps = {}; raise train_steps", path,
             field("step"), cfg_.train_steps);
  // The loader counts batches of data-parallel ranks x micro-batch sequences: with another
  // product (e.g. a pp x dp run resumed with pp = 1 at the same micro-batch) the same sequence
  // position is another batch index. (Checkpoints without data_batch_sequences are taken as
  // written with this run's.)
  uint64_t data_batch = static_cast<uint64_t>(field("data_batch"));
  const int64_t saved = run.contains("data_batch_sequences") ? field("data_batch_sequences") : 0;
  const int64_t per_batch = int64_t{data_parallel_ranks()} * cfg_.micro_batch;
  if (saved > 0 && saved != per_batch) {
    const uint64_t sequences = data_batch * static_cast<uint64_t>(saved);
    TIDE_CHECK(sequences % per_batch == 0,
               "checkpoint '{}' stopped at sequence {} of its epoch, which is not a whole batch "
               "of {} data-parallel ranks x {} sequences; resume it with data-parallel ranks x "
               "train_micro_batch_size_per_gpu = {}",
               path, sequences, data_parallel_ranks(), cfg_.micro_batch, saved);
    data_batch = sequences / per_batch;
  }
  RunPosition at{field("step"), static_cast<uint64_t>(field("data_epoch")), data_batch, {}};
  // fp16's loss scaler (checkpoints before it have none: a fresh scaler, fine for f32/bf16).
  if (run.contains("loss_scaler")) at.loss_scaler = loss_scaler_state(run["loss_scaler"], path);
  return at;
}

void Trainer::log_pipeline_measurement(const StepRunner::Measured& pm, std::ofstream& metrics,
                                       const std::string& metrics_path) {
  // zb-auto's warm-up step: the measured per-stage figures (seconds per micro-batch) and the
  // generated schedule's bubble when simulated under them.
  const StepMeasurement& m = pm.measurement;
  json t_f = json::array(), t_b = json::array(), t_w = json::array();
  for (const pipeline::CostModel& c : m.stages) {
    t_f.push_back(c.t_f);
    t_b.push_back(c.t_b);
    t_w.push_back(c.t_w);
  }
  const pipeline::SimResult& sim = pm.simulated;
  const std::string schedule = runner_->engine().schedule().name;
  write_metrics(metrics, metrics_path,
                json{{"step", step_},
                     {"pipeline_measured",
                      {{"t_f", t_f},
                       {"t_b", t_b},
                       {"t_w", t_w},
                       {"t_comm", m.t_comm},
                       {"waited_receives", m.waited_receives},
                       {"schedule", schedule},
                       {"simulated_makespan_s", sim.makespan},
                       {"simulated_bubble_s", sim.bubble},
                       {"simulated_bubble_rate", sim.bubble_rate}}},
                     {"time", unix_seconds()}});
  const pipeline::CostModel g = m.generator_costs();  // the slowest stage's figures
  progress_.print(fmt::format(
      "tide: zb-auto from step {} measured (slowest stage, per micro-batch): T_F {:.3f} ms, T_B "
      "{:.3f} ms, T_W {:.3f} ms, T_comm {:.3f} ms -> schedule {}, simulated bubble {:.1f}% "
      "({:.3f} ms of {:.3f} ms){}",
      step_, g.t_f * 1e3, g.t_b * 1e3, g.t_w * 1e3, m.t_comm * 1e3, schedule, sim.bubble_rate * 100,
      sim.bubble * 1e3, sim.makespan * 1e3,
      microbatch_hint(m, cfg_.grad_accum, cfg_.pipeline_memory_limit)));
}

void Trainer::run() {
  // An error ends an open in-place progress line first, so that its message starts a line.
  try {
    run_steps();
  } catch (...) {
    progress_.finish();
    throw;
  }
  progress_.finish();
}

StepStats Trainer::first_placed_step(std::optional<float>& val0) {
  try {
    if (val_loader_ && cfg_.resume.empty()) val0 = evaluate();
    return train_step();
  } catch (const Error& e) {
    throw Error(fmt::format(
        "{}\ntide: placement.policy=auto stopped in its first step, before anything was written "
        "to out_dir '{}'{}",
        e.what(), cfg_.out_dir, least_limit_hint()));
  }
}

std::string Trainer::least_limit_hint() const {
  // The figure tide estimate gives for the same config, as a hint (an estimate: the runtime's
  // own need was the figure in the error).
  try {
    TrainSetup setup = setup_from_train_config(cfg_);
    setup.world_size = world_->size();  // the ranks launched (world_size 0 in the config)
    const int64_t least = estimate_memory(setup).limit.least_limit;
    if (least > 0)
      return fmt::format("; `tide estimate --config` puts the least limit for this config at {}",
                         format_bytes(least));
  } catch (const Error&) {  // the estimate cannot size this config: no hint
  }
  return "";
}

void Trainer::run_steps() {
  const bool rank0 = world_->rank() == 0;
  // placement.policy=auto learns its plan in its first step, the step where a
  // placement.device_memory_limit too small for this run fails: that step runs before anything
  // is written (the step-0 validation before it, logged after it).
  std::optional<float> val0;
  std::optional<StepStats> first;
  if (cfg_.placement_policy == "auto" && step_ < cfg_.train_steps) {
    if (rank0) check_out_dir(cfg_);
    first = first_placed_step(val0);
  }
  std::ofstream metrics;
  const std::string metrics_path = (fs::path(cfg_.out_dir) / "metrics.jsonl").string();
  if (rank0) {
    // An earlier run's files are never overwritten by accident (checked before anything is
    // written); config.json is replaced atomically, and a resumed run continues the metrics of
    // the run it resumes.
    check_out_dir(cfg_);
    std::error_code ec;
    fs::create_directories(cfg_.out_dir, ec);
    TIDE_CHECK(!ec, "out_dir '{}': cannot create it ({}); choose a writable directory",
               cfg_.out_dir, ec.message());
    // The trace's directory and the event file: any error comes before config.json and
    // metrics.jsonl are written.
    if (cfg_.trace_steps > 0) create_parent_directory(trace_file());
    if (cfg_.tensorboard) {
      fs::path dir = cfg_.tensorboard_path.empty() ? fs::path(cfg_.out_dir) / "tensorboard"
                                                   : fs::path(cfg_.tensorboard_path);
      if (!cfg_.tensorboard_job.empty()) dir /= cfg_.tensorboard_job;
      tensorboard_ = std::make_unique<TensorBoardWriter>(dir.string());
    }
    write_file_atomically((fs::path(cfg_.out_dir) / "config.json").string(),
                          config_to_json(cfg_).dump(2) + "\n");
    if (!cfg_.resume.empty() && fs::exists(metrics_path))
      rewind_metrics(metrics_path, step_, cfg_.resume);
    metrics.open(metrics_path, cfg_.resume.empty() ? std::ios::trunc : std::ios::app);
    TIDE_CHECK(metrics.good(), "{}: cannot open for writing; check that out_dir is writable",
               metrics_path);
    if (!cfg_.resume.empty()) fmt::print("tide: resumed from {} at step {}\n", cfg_.resume, step_);
    const size_t act = runner_->activation_bytes();
    const std::string ranks = parallelism_line(cfg_, mesh_->shape());
    fmt::print(
        "tide: model {} | {} | micro-batch {} x {} tokens, accum {} | "
        "activations: {}{}\n",
        cfg_.model.str(), ranks, cfg_.micro_batch, cfg_.seq_len, cfg_.grad_accum,
        activation_policy_name(cfg_.activation_policy),
        !cfg_.partition_activations ? ""
        : cfg_.cpu_checkpointing    ? ", partitioned over tp (P_a), on the host (cpu_checkpointing)"
                                    : ", partitioned over tp (P_a)");
    fmt::print(
        "tide: data {} ({} tokens){} | chunks: {} (largest {:.2f} MiB) | memory: {:.1f} MiB model "
        "states + {:.1f} MiB activations{}{}\n",
        cfg_.train_data, train_loader_->num_tokens(),
        unigram_ ? fmt::format(", unigram baseline {:.3f} nats", *unigram_) : "",
        model().store().layout().num_chunks(),
        model().store().layout().max_chunk_elems() * 4 / 1048576.0,
        runner_->model_state_bytes() / 1048576.0, act / 1048576.0,
        cfg_.cpu_checkpointing ? fmt::format(" + {:.1f} MiB host checkpoints",
                                             runner_->engine().host_checkpoint_bytes() / 1048576.0)
                               : "",
        cfg_.pipeline_stages > 1
            ? (cfg_.tensor_parallel > 1 ? " (rank 0's stage shards)" : " (rank 0's stage)")
        : cfg_.tensor_parallel > 1 ? " (rank 0's shards)"
                                   : "");
    std::fflush(stdout);
  }
  auto log_eval = [&](int64_t at, float val) {
    if (!rank0) return;
    write_metrics(metrics, metrics_path,
                  json{{"step", at}, {"val_loss", val}, {"time", unix_seconds()}});
    progress_.print(
        fmt::format("step {:>6} | val loss {:.4f}{}", at, val,
                    unigram_ ? fmt::format(" (unigram baseline {:.4f})", *unigram_) : ""));
  };
  // Step 0's validation (a fresh run starts at step 0; with auto placement the first step has
  // run already, after it was taken: val0).
  if (val_loader_ && cfg_.resume.empty()) log_eval(0, val0 ? *val0 : evaluate());

  // The run's time counts the early first step's, not the writes and validation around it.
  const auto t_start =
      Clock::now() - std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(first ? first->seconds : 0.0));
  int64_t tokens_done = 0;
  // Throughput over the last log interval (the steps since the previous training metrics
  // line), timed over its training steps only: an evaluation or a checkpoint in between does
  // not show as a dip.
  double seconds_interval = 0;
  int64_t tokens_interval = 0;
  while (step_ < cfg_.train_steps) {
    const auto t_step = Clock::now();
    const StepStats st = first ? *first : train_step();
    seconds_interval += first ? first->seconds : seconds_since(t_step);
    first.reset();
    tokens_done += st.tokens;
    tokens_interval += st.tokens;
    if (const StepRunner::Measured* pm = runner_->take_new_measurement(); pm && rank0)
      log_pipeline_measurement(*pm, metrics, metrics_path);
    if (rank0) {
      const double elapsed = seconds_since(t_start);
      const double tok_s = tokens_done / elapsed;
      const double eta = elapsed / step_ * (cfg_.train_steps - step_);
      std::string line = fmt::format(
          "step {:>6}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.0f} tok/s | mem {:.0f} MiB | "
          "ETA {}",
          step_, cfg_.train_steps, st.loss, st.lr, st.grad_norm, tok_s, memory_bytes() / 1048576.0,
          human_duration(eta));
      if (cfg_.fp16) line += fmt::format(" | scale {:g}", st.next_loss_scale);
      if (cfg_.zero.offload_optimizer.enabled) line += offload_progress(st.offload);
      if (cfg_.placement_policy == "auto") line += placement_progress(st.placement);
      // As DeepSpeed's "OVERFLOW! Skipping step" line: every rank skipped this step.
      if (cfg_.fp16 && st.skipped)
        progress_.print(
            st.next_loss_scale < st.loss_scale
                ? fmt::format("step {}: fp16 gradients overflowed (NaN/Inf); step skipped, loss "
                              "scale {:g} -> {:g}",
                              step_, st.loss_scale, st.next_loss_scale)
                : fmt::format("step {}: fp16 gradients overflowed (NaN/Inf); step skipped, loss "
                              "scale stays {:g} (hysteresis now {}; an overflow at 1 halves it)",
                              step_, st.loss_scale, runner_->loss_scaler().hysteresis()));
      const bool logged = step_ % cfg_.log_interval == 0 || step_ == cfg_.train_steps;
      if (logged) {
        const double interval_tok_s = tokens_interval / seconds_interval;
        json record{{"step", step_},
                    {"loss", st.loss},
                    {"lr", st.lr},
                    {"grad_norm", st.grad_norm},
                    {"step_seconds", st.seconds},
                    {"comm_wait_seconds", st.comm_seconds},
                    {"tokens_per_s", tok_s},
                    {"tokens_per_s_interval", interval_tok_s},
                    {"time", unix_seconds()}};
        if (cfg_.fp16) {
          record["loss_scale"] = st.loss_scale;
          record["skipped_steps"] = runner_->loss_scaler().skipped_steps();
        }
        if (cfg_.zero.offload_optimizer.enabled) add_offload_metrics(record, st.offload);
        if (cfg_.placement_policy == "auto") add_placement_metrics(record, st.placement);
        // On a device: the most its budgeted allocator has held (chunks, ZeRO's buffers, the
        // arenas), the figure `tide estimate`'s per-GPU total sizes.
        if (!op_.device.is_cpu() && compute_alloc_)
          record["device_peak_bytes"] = compute_alloc_->peak();
        write_metrics(metrics, metrics_path, record);
        seconds_interval = 0;
        tokens_interval = 0;
      }
      progress_.update(line, logged);
    }
    const bool eval_now = cfg_.eval_interval > 0 && step_ % cfg_.eval_interval == 0;
    if (val_loader_ && (eval_now || step_ == cfg_.train_steps)) log_eval(step_, evaluate());
    if (cfg_.checkpoint_interval > 0 && step_ % cfg_.checkpoint_interval == 0 &&
        step_ < cfg_.train_steps) {
      const std::string path = save(fmt::format("model_step{}.ckpt", step_));
      if (rank0)
        progress_.print(
            fmt::format("tide: checkpoint {} (resume with checkpoint.resume=<it>)", path));
    }
    if (stop_agreed_ && step_ < cfg_.train_steps) {  // preemption: every rank stops here
      write_trace();
      const std::string path = save(fmt::format("model_step{}.ckpt", step_));
      if (rank0)
        progress_.print(
            fmt::format("tide: stopped at step {}/{} on request (signal); checkpoint {}\n"
                        "tide: resume with the same command plus checkpoint.resume={}",
                        step_, cfg_.train_steps, path, path));
      return;
    }
  }
  write_trace();  // a window cut short by train_steps (collective: every rank gets here)
  const std::string path = save();
  if (rank0) {
    progress_.print(fmt::format("tide: trained {} step{} in {}; checkpoint {}", step_,
                                step_ == 1 ? "" : "s", human_duration(seconds_since(t_start)),
                                path));
    progress_.print(fmt::format("tide: try `tide sample --checkpoint {}`", path));
  }
}

}  // namespace tide
