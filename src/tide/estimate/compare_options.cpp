#include "tide/estimate/compare_options.h"

#include "tide/core/error.h"
#include "tide/memory/allocator.h"
#include "tide/model/layout.h"

namespace tide {

std::string option_name(int zero_stage, Offload offload) {
  std::string name = zero_stage == 0 ? "DDP" : "ZeRO-" + std::to_string(zero_stage);
  if (offload == Offload::Optimizer) name += "+offload_opt";
  if (offload == Offload::All) name += "+offload_all";
  return name;
}

std::vector<MemoryOption> standard_options() {
  const std::pair<int, Offload> placements[] = {{0, Offload::None},      {1, Offload::None},
                                                {2, Offload::None},      {3, Offload::None},
                                                {2, Offload::Optimizer}, {3, Offload::All}};
  std::vector<MemoryOption> out;
  for (auto [stage, offload] : placements)
    for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
      out.push_back({option_name(stage, offload), stage, offload, r});
  return out;
}

TrainSetup with_option(TrainSetup setup, const MemoryOption& option) {
  setup.zero_stage = option.zero_stage;
  setup.offload = option.offload;
  setup.recompute = option.recompute;
  // placement.policy=auto refuses offload: the offload rows are sized as placement=device.
  if (option.offload != Offload::None) setup.placement = Placement::Device;
  if (option.placement == Placement::Auto) setup.placement = Placement::Auto;
  return setup;
}

namespace {

OptionResult evaluate(const TrainSetup& setup, const MemoryOption& option,
                      const MachineBudget& budget) {
  OptionResult r;
  r.option = option;
  r.estimate = estimate_memory(with_option(setup, option));
  r.fits_gpu = budget.gpu_bytes == 0 || r.estimate.device.total() <= budget.gpu_bytes;
  r.fits_host = budget.host_bytes == 0 || r.estimate.host.total() <= budget.host_bytes;
  r.configured = option.zero_stage == setup.zero_stage && option.offload == setup.offload &&
                 option.recompute == setup.recompute;
  return r;
}

}  // namespace

std::vector<OptionResult> compare_options(const TrainSetup& setup, const MachineBudget& budget) {
  std::vector<OptionResult> out;
  bool have_configured = false;
  for (const MemoryOption& o : standard_options()) {
    out.push_back(evaluate(setup, o, budget));
    have_configured |= out.back().configured;
  }
  if (!have_configured) {
    MemoryOption own{option_name(setup.zero_stage, setup.offload), setup.zero_stage, setup.offload,
                     setup.recompute};
    out.push_back(evaluate(setup, own, budget));
  }
  return out;
}

GrowthFamily parse_growth_family(const std::string& s) {
  if (s == "hidden") return GrowthFamily::Hidden;
  if (s == "layers") return GrowthFamily::Layers;
  TIDE_FAIL("unknown model family '{}' for --grow; use hidden or layers", s);
}

std::string to_string(GrowthFamily f) {
  return f == GrowthFamily::Hidden ? "hidden" : "layers";
}

namespace {

// The family's k-th shape, or false when it violates the parallel layout.
bool family_member(const TrainSetup& base, GrowthFamily family, int k, GPTConfig& out) {
  out = base.model;
  if (family == GrowthFamily::Hidden) {
    const int head_size = base.model.head_size();
    out.n_embd = 128 * k;
    if (out.n_embd % head_size != 0) return false;
    out.n_head = out.n_embd / head_size;
    if (base.model.is_llama()) {
      // The Llama family keeps its query heads per key/value head and its MLP's width per
      // hidden unit (the published sizes are multiples of 256: rounded up to one).
      const int group = base.model.n_head / base.model.kv_heads();
      if (out.n_head % group != 0) return false;
      out.n_kv_head = out.n_head / group;
      const int64_t f =
          (base.model.ffn_size() * out.n_embd + base.model.n_embd - 1) / base.model.n_embd;
      out.intermediate_size = static_cast<int>((f + 255) / 256 * 256);
    }
  } else {
    // Every model chunk whole layers: interleaved's v chunks per stage, zb-v's two.
    out.n_layer = k * base.pp * (base.pp > 1 ? base.virtual_stages : 1);
  }
  // The hidden family keeps the head size and the layers family the hidden size, so n_embd and
  // n_layer divide over the layout by construction; the heads (and the Llama family's key/value
  // heads and MLP width) are the shape's own rule.
  try {
    out.validate();
    check_tensor_parallel_shape(out, base.tp);
  } catch (const Error&) {
    return false;
  }
  return true;
}

}  // namespace

std::vector<MaxModelResult> find_max_models(const TrainSetup& setup, const MachineBudget& budget,
                                            GrowthFamily family) {
  TIDE_CHECK(budget.gpu_bytes > 0,
             "--max-model needs the GPU memory to fit into; give it with --gpu-mem (e.g. 80GiB)");
  // The standard options: the largest model whose states all fit the GPU (placement=auto would
  // let any model "fit" a device total it caps at the limit, so they size placement=device).
  // The +auto rows: the states spread over the GPU's budget and the host.
  TrainSetup base = setup;
  base.placement = Placement::Device;
  TrainSetup base_auto = setup;
  if (base_auto.device_memory_limit == 0)
    base_auto.device_memory_limit = default_auto_device_limit({budget.gpu_bytes, budget.gpu_bytes});
  std::vector<MemoryOption> options = standard_options();
  // Without a host budget any model would fit auto: no +auto rows.
  if (budget.host_bytes > 0)
    for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
      options.push_back({option_name(setup.zero_stage, Offload::None) + "+auto", setup.zero_stage,
                         Offload::None, r, Placement::Auto});
  // k up to 1024: hidden 131072 or 1024 layers per stage, far beyond any machine.
  const int k_max = 1024;
  std::vector<std::pair<int, GPTConfig>> shapes;
  for (int k = 1; k <= k_max; ++k) {
    GPTConfig c;
    if (family_member(setup, family, k, c)) shapes.emplace_back(k, c);
  }
  TIDE_CHECK(!shapes.empty(),
             "no model of the '{}' family fits the parallel layout (tp {}, pp {}); change tp/pp",
             to_string(family), setup.tp, setup.pp);
  std::vector<MaxModelResult> out;
  for (const MemoryOption& o : options) {
    MaxModelResult r;
    r.option = o;
    auto fits = [&](const GPTConfig& c, MemoryEstimate& est) {
      TrainSetup t = with_option(o.placement == Placement::Auto ? base_auto : base, o);
      t.model = c;
      est = estimate_memory(t);
      return est.limit.fits() && est.device.total() <= budget.gpu_bytes &&
             (budget.host_bytes == 0 || est.host.total() <= budget.host_bytes);
    };
    // Bisection for the last fitting shape: shapes[lo] fits (once found), shapes[hi] does not.
    int lo = -1, hi = static_cast<int>(shapes.size());
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      MemoryEstimate est;
      if (fits(shapes[mid].second, est)) {
        lo = mid;
        r.found = true;
        r.model = shapes[mid].second;
        r.estimate = est;
      } else {
        hi = mid;
      }
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace tide
