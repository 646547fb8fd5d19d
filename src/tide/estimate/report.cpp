#include "tide/estimate/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tide/core/byte_size.h"
#include "tide/estimate/pipeline_inflight.h"

namespace tide {

nlohmann::json breakdown_json(const MemoryBreakdown& b) {
  return {{"param16", b.param16},
          {"grads", b.grads},
          {"master", b.master},
          {"adam_m", b.adam_m},
          {"adam_v", b.adam_v},
          {"activations", b.activations},
          {"temp_buffers", b.temp_buffers},
          {"chunk_padding", b.chunk_padding},
          {"arenas", b.arenas},
          {"total", b.total()}};
}

nlohmann::json setup_json(const TrainSetup& s) {
  return {{"model",
           {{"n_layer", s.model.n_layer},
            {"n_head", s.model.n_head},
            {"n_embd", s.model.n_embd},
            {"vocab_size", s.model.vocab_size},
            {"max_seq_len", s.model.max_seq_len},
            {"parameters", s.model.num_parameters()}}},
          {"world_size", s.world_size},
          {"dp", s.dp()},
          {"tp", s.tp},
          {"pp", s.pp},
          {"sp", s.sp},
          {"seq_len", s.seq()},
          {"micro_batch", s.micro_batch},
          {"gradient_accumulation_steps", s.grad_accum},
          {"zero_stage", s.zero_stage},
          {"offload", to_string(s.offload)},
          {"recompute", to_string(s.recompute)},
          {"precision", to_string(s.precision)},
          {"optimizer", to_string(s.optimizer)},
          {"schedule", to_string(s.schedule)},
          {"virtual_stages", s.virtual_stages},
          {"memory_limit", s.memory_limit},
          // true: the activations are an upper bound (zb-auto, zb-1p, zb-2p: the schedule is
          // built from measured times under a memory limit), not the schedule's exact peak.
          {"activations_at_most", inflight_is_bound(s.schedule, s.pp)},
          {"chunk_size_mb", s.chunk_mib},
          {"ranks_per_host", s.ranks_per_host()},
          {"placement", to_string(s.placement)},
          {"device_memory_limit", s.device_memory_limit}};
}

nlohmann::json chunk_plan_json(const ChunkPlan& p) {
  return {{"count", p.chunks},
          {"target_elems", p.target_elems},
          {"largest_elems", p.largest_chunk_elems},
          {"total_elems", p.total_elems},
          {"owned_elems_per_rank", p.owned_elems},
          {"param_elems", p.payload_elems}};
}

nlohmann::json limit_fit_json(const LimitFit& f) {
  if (f.limit == 0) return nullptr;
  nlohmann::json j = {{"policy", f.auto_placement ? "auto" : "device"},
                      {"limit", f.limit},
                      {"device_total", f.device_total},
                      {"device_fits", f.device_fits},
                      {"margin", f.margin()},
                      {"fits", f.fits()}};
  if (f.auto_placement)
    j["auto"] = {{"states", f.states},
                 {"non_model", f.non_model},
                 {"states_on_device", f.states_on_device},
                 {"states_on_host", f.states_on_host},
                 {"largest_group_chunks", f.largest_group},
                 {"least_limit", f.least_limit},
                 {"least_moved_per_step", f.least_moved},
                 {"fits", f.auto_fits}};
  return j;
}

std::string limit_fit_text(const LimitFit& f) {
  if (f.limit == 0) return "";
  const std::string by = f.device_fits ? fmt::format("fits, {} under it", format_bytes(f.margin()))
                                       : fmt::format("over it by {}", format_bytes(-f.margin()));
  std::string out =
      fmt::format("device_memory_limit {}: with every state on the GPU the per-GPU total is {}, {}",
                  format_bytes(f.limit), format_bytes(f.device_total), by);
  if (!f.auto_placement) {
    if (!f.device_fits)
      out += "; tide train (placement=device) fails at its first allocation past the limit";
    return out + "\n";
  }
  out += fmt::format(
      "\nplacement auto: {} of model states, {} non-model (activations, temp, arenas); {} of the "
      "states on the GPU, {} on the host\n",
      format_bytes(f.states), format_bytes(f.non_model), format_bytes(f.states_on_device),
      format_bytes(f.states_on_host));
  if (!f.auto_fits)
    return out + fmt::format(
                     "placement auto: does not fit: the limit {} is under the least auto needs, "
                     "{} (non-model {} + the largest parameter group's chunks {}); raise "
                     "placement.device_memory_limit or lower the non-model bytes\n",
                     format_bytes(f.limit), format_bytes(f.least_limit), format_bytes(f.non_model),
                     format_bytes(f.largest_group));
  return out + fmt::format(
                   "placement auto: fits: least limit {} (non-model + the largest parameter "
                   "group's chunks {}); moves at least {} each way per step\n",
                   format_bytes(f.least_limit), format_bytes(f.largest_group),
                   format_bytes(f.least_moved));
}

namespace {

// Whether row `r` is a ZeRO stage without offload at data-parallel size 1 whose bytes are DDP's
// (the DDP row of the same recompute), category by category on the device and the host. At
// dp 1 ZeRO partitions over one rank, but its defaults may still differ from DDP's: bf16 keeps
// f32 gradients and reduces through bf16 staging at stage 0 only (default_grad_dtype), so the
// bytes decide, not the stage.
bool equals_ddp(const TrainSetup& setup, const OptionResult& r,
                const std::vector<OptionResult>& rows) {
  if (setup.dp() != 1 || r.option.zero_stage == 0 || r.option.offload != Offload::None)
    return false;
  for (const OptionResult& d : rows)
    if (d.option.zero_stage == 0 && d.option.offload == Offload::None &&
        d.option.recompute == r.option.recompute)
      return d.estimate.device == r.estimate.device && d.estimate.host == r.estimate.host;
  return false;
}

// "4 chunks (largest 38.60M elements), 124.44M elements in all, 1.94M per rank (every chunk
// sliced over dp 64)", one line per stage.
std::string chunk_lines(const TrainSetup& setup, const MemoryEstimate& est) {
  std::string out;
  for (const StageEstimate& st : est.stages) {
    const ChunkPlan& c = st.chunks;
    out += fmt::format(
        "{}{} chunks (largest {:.2f}M elements), {:.2f}M elements in all, {:.2f}M per rank "
        "(every chunk sliced over dp {})\n",
        setup.pp > 1 ? fmt::format("stage {}: ", st.stage) : "", c.chunks,
        c.largest_chunk_elems / 1e6, c.total_elems / 1e6, c.owned_elems / 1e6, setup.dp());
  }
  return out;
}

nlohmann::json budget_json(const MachineBudget& b) {
  return {{"gpu_bytes", b.gpu_bytes}, {"host_bytes", b.host_bytes}};
}

// "Communication buffers (whole chunks in size classes, reused every step; part of temp): ZeRO-2
// 10 buffers, 1.42 GiB (at the peak 10 grad), ZeRO-3 ...", from the first row of each stage that
// has any (DDP and ZeRO-1: communication_data_type's staging alone).
// What one stage's buffers are: "at the peak 9 grad + 2 param, 1 persistent, 20 staging".
std::string buffer_detail(int stage, const ZeroBufferPeak& b) {
  std::vector<std::string> parts;
  if (stage >= 2)
    parts.push_back(fmt::format("at the peak {} grad{}", b.grad_buffers,
                                stage == 3 ? fmt::format(" + {} param", b.param_buffers) : ""));
  if (stage == 3) parts.push_back(fmt::format("{} persistent", b.persistent));
  if (b.staging > 0) parts.push_back(fmt::format("{} staging", b.staging));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string buffer_line(const std::vector<OptionResult>& rows) {
  std::string parts;
  for (int stage : {0, 1, 2, 3}) {
    for (const OptionResult& r : rows) {
      if (r.option.zero_stage != stage) continue;
      const ZeroBufferPeak& b = r.estimate.stages[r.estimate.peak_stage].comm_buffers;
      if (b.buffers == 0) break;  // one data-parallel rank: ZeRO reduces and gathers nothing
      parts += fmt::format("{}{} {} buffers, {} ({})", parts.empty() ? "" : ", ", r.option.name,
                           b.buffers, format_bytes(b.bytes), buffer_detail(stage, b));
      break;
    }
  }
  if (parts.empty()) return "";
  return fmt::format(
      "Communication buffers (whole chunks in size classes, reused every step; part of temp): {}\n",
      parts);
}

std::string budget_line(const MachineBudget& b, int ranks_per_host) {
  return fmt::format("budget: {} per GPU, {} per host ({} GPUs per host)",
                     b.gpu_bytes ? format_bytes(b.gpu_bytes) : "unlimited (no --gpu-mem)",
                     b.host_bytes ? format_bytes(b.host_bytes) : "unlimited (no --host-mem)",
                     ranks_per_host);
}

std::string fit_mark(bool gpu, bool host) {
  if (gpu && host) return "yes";
  if (!gpu && !host) return "no: gpu+host";
  return gpu ? "no: host" : "no: gpu";
}

}  // namespace

std::string options_table_text(const TrainSetup& setup, const MachineBudget& budget,
                               const std::vector<OptionResult>& rows) {
  std::string out = setup.str() + "\n" + budget_line(budget, setup.ranks_per_host()) + "\n";
  if (!rows.empty()) out += chunk_lines(setup, rows.front().estimate) + buffer_line(rows);
  if (inflight_is_bound(setup.schedule, setup.pp))
    out += fmt::format(
        "activations: at most {} micro-batches in flight per stage ({} builds its order from the "
        "times tide train measures; this is its memory limit, the true peak can be lower)\n",
        inflight_microbatches(setup.schedule, setup.pp, 0, setup.grad_accum, 1, setup.memory_limit),
        to_string(setup.schedule));
  // With one data-parallel rank ZeRO has nothing to partition over: stages 1-3 without offload
  // whose bytes are DDP's are folded into DDP's rows. They fold all or none: they differ from
  // DDP only by DDP's own dtype default (default_grad_dtype at stage 0), the same for 1-3.
  auto folded = [&](const OptionResult& r) { return equals_ddp(setup, r, rows); };
  const OptionResult* configured_folded = nullptr;
  bool any_folded = false;
  int64_t largest = 0;
  for (const OptionResult& r : rows) {
    if (folded(r)) {
      any_folded = true;
      if (r.configured) configured_folded = &r;
      continue;
    }
    largest = std::max({largest, r.estimate.device.total(), r.estimate.host.total()});
  }
  const TableUnit unit = table_unit(largest);
  out += fmt::format(
      "{}; per-GPU columns are the busiest pipeline stage; per host = one host's memory for its "
      "{} GPU{} (the offloaded states; '-' = none: data loading and the program are not "
      "counted); * = the configured option\n",
      unit.name, setup.ranks_per_host(), setup.ranks_per_host() == 1 ? "" : "s");
  if (any_folded)
    out += fmt::format(
        "ZeRO-1/2/3 without offload are not shown: at data-parallel size 1 they partition over "
        "one rank and equal DDP{}\n",
        configured_folded ? fmt::format(" (the configured {} is the DDP row marked *)",
                                        configured_folded->option.name)
                          : "");
  out += "\n";
  const auto line = [](auto&&... cols) {
    return fmt::format(
        "{:<1}{:<20} {:<9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}  {}\n", cols...);
  };
  out += line("", "option", "recompute", "params", "grads", "optim", "activ", "temp", "padding",
              "arenas", "per GPU", "per host", "fits");
  for (const OptionResult& r : rows) {
    if (folded(r)) continue;
    const bool marked = r.configured || (configured_folded && r.option.zero_stage == 0 &&
                                         r.option.offload == Offload::None &&
                                         r.option.recompute == configured_folded->option.recompute);
    const MemoryBreakdown& d = r.estimate.device;
    const auto f = [&](int64_t b) { return format_in(b, unit); };
    out += line(marked ? "*" : " ", r.option.name, to_string(r.option.recompute), f(d.param16),
                f(d.grads), f(d.optimizer_states()), f(d.activations), f(d.temp_buffers),
                f(d.chunk_padding), f(d.arenas), f(d.total()), f(r.estimate.host.total()),
                fit_mark(r.fits_gpu, r.fits_host));
  }
  for (const OptionResult& r : rows)
    if (r.configured && r.estimate.limit.limit > 0) out += "\n" + limit_fit_text(r.estimate.limit);
  return out;
}

nlohmann::json options_table_json(const TrainSetup& setup, const MachineBudget& budget,
                                  const std::vector<OptionResult>& rows) {
  nlohmann::json options = nlohmann::json::array();
  for (const OptionResult& r : rows) {
    nlohmann::json stages = nlohmann::json::array();
    for (const StageEstimate& st : r.estimate.stages)
      stages.push_back({{"stage", st.stage},
                        {"layers", st.layers},
                        {"params", st.params},
                        {"inflight_microbatches", st.inflight_microbatches},
                        {"inflight_layer_microbatches", st.inflight_layer_microbatches},
                        {"chunks", chunk_plan_json(st.chunks)},
                        {"comm_buffers",
                         {{"count", st.comm_buffers.buffers},
                          {"grad", st.comm_buffers.grad_buffers},
                          {"param", st.comm_buffers.param_buffers},
                          {"persistent", st.comm_buffers.persistent},
                          {"staging", st.comm_buffers.staging},
                          {"bytes", st.comm_buffers.bytes}}},
                        {"tied_gather_bytes", st.tied_gather_bytes},
                        {"device", breakdown_json(st.device)},
                        {"host", breakdown_json(st.host)}});
    options.push_back({{"option", r.option.name},
                       {"zero_stage", r.option.zero_stage},
                       {"offload", to_string(r.option.offload)},
                       {"recompute", to_string(r.option.recompute)},
                       {"configured", r.configured},
                       // The dtypes of this row's stage (the keys, or DeepSpeed's defaults).
                       {"grad_precision", to_string(grad_precision_of(setup, r.option.zero_stage))},
                       {"comm_precision", to_string(comm_precision_of(setup, r.option.zero_stage))},
                       // ZeRO 1-3 without offload at data-parallel size 1 with DDP's bytes (the
                       // text table folds these rows into DDP's).
                       {"equal_to_ddp", equals_ddp(setup, r, rows)},
                       {"peak_stage", r.estimate.peak_stage},
                       {"device", breakdown_json(r.estimate.device)},
                       {"host_per_rank", breakdown_json(r.estimate.host_per_rank)},
                       {"host", breakdown_json(r.estimate.host)},
                       {"fits_gpu", r.fits_gpu},
                       {"fits_host", r.fits_host},
                       {"fits", r.fits()},
                       {"device_memory_limit", limit_fit_json(r.estimate.limit)},
                       {"stages", stages}});
  }
  return {{"setup", setup_json(setup)}, {"budget", budget_json(budget)}, {"options", options}};
}

std::string max_model_text(const TrainSetup& setup, const MachineBudget& budget,
                           GrowthFamily family, const std::vector<MaxModelResult>& rows) {
  std::string out = fmt::format(
      "largest model that fits, growing {} (vocab {}, seq {}, {}), world {} = dp {} x tp {} x pp "
      "{}, micro-batch {} x {}\n{}\n\n",
      family == GrowthFamily::Hidden
          ? fmt::format(
                "hidden = 128k with {} layers, head size {}{}", setup.model.n_layer,
                setup.model.head_size(),
                setup.model.is_llama()
                    ? fmt::format(", {} query heads per key/value head, MLP {:.3g} x hidden",
                                  setup.model.n_head / setup.model.kv_heads(),
                                  static_cast<double>(setup.model.ffn_size()) / setup.model.n_embd)
                    : "")
          : fmt::format("layers with hidden {} and {} heads", setup.model.n_embd,
                        setup.model.n_head),
      setup.model.vocab_size, setup.seq(), to_string(setup.precision), setup.world_size, setup.dp(),
      setup.tp, setup.pp, setup.micro_batch, setup.grad_accum,
      budget_line(budget, setup.ranks_per_host()));
  const auto line = [](auto&&... cols) {
    return fmt::format("{:<20} {:<9} {:>7} {:>6} {:>7} {:>11} {:>9} {:>9}\n", cols...);
  };
  int64_t largest = 0;
  for (const MaxModelResult& r : rows)
    if (r.found) largest = std::max({largest, r.estimate.device.total(), r.estimate.host.total()});
  const TableUnit unit = table_unit(largest);
  out += line("option", "recompute", "layers", "heads", "hidden", "params",
              fmt::format("GPU {}", unit.name), fmt::format("host {}", unit.name));
  for (const MaxModelResult& r : rows) {
    if (!r.found) {
      out +=
          line(r.option.name, to_string(r.option.recompute), "-", "-", "-", "none fits", "-", "-");
      continue;
    }
    out +=
        line(r.option.name, to_string(r.option.recompute), r.model.n_layer, r.model.n_head,
             r.model.n_embd, fmt::format("{:.2f}B", r.model.num_parameters() / 1e9),
             format_in(r.estimate.device.total(), unit), format_in(r.estimate.host.total(), unit));
  }
  return out;
}

nlohmann::json max_model_json(const TrainSetup& setup, const MachineBudget& budget,
                              GrowthFamily family, const std::vector<MaxModelResult>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const MaxModelResult& r : rows) {
    nlohmann::json row = {{"option", r.option.name},
                          {"zero_stage", r.option.zero_stage},
                          {"offload", to_string(r.option.offload)},
                          {"recompute", to_string(r.option.recompute)},
                          {"found", r.found}};
    if (r.found) {
      row["model"] = {{"n_layer", r.model.n_layer},
                      {"n_head", r.model.n_head},
                      {"n_embd", r.model.n_embd},
                      {"parameters", r.model.num_parameters()}};
      row["device"] = breakdown_json(r.estimate.device);
      row["host"] = breakdown_json(r.estimate.host);
    }
    out.push_back(row);
  }
  return {{"setup", setup_json(setup)},
          {"budget", budget_json(budget)},
          {"family", to_string(family)},
          {"max_model", out}};
}

}  // namespace tide
