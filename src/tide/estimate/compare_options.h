#pragma once
// The table `tide estimate` prints: one setup estimated under every memory option side by
// side, and the largest model of a shape family that fits a machine under each option.

#include <cstdint>
#include <string>
#include <vector>

#include "tide/estimate/memory_estimate.h"
#include "tide/estimate/train_setup.h"

namespace tide {

// Memory of one machine; 0 = not given (not checked).
struct MachineBudget {
  int64_t gpu_bytes = 0;   // per GPU
  int64_t host_bytes = 0;  // per host (shared by TrainSetup::ranks_per_host() ranks)
};

// One column group of the comparison: a ZeRO stage, an offload placement, a recompute policy.
struct MemoryOption {
  std::string name;  // "DDP", "ZeRO-1", ..., "ZeRO-3+offload_all"
  int zero_stage = 0;
  Offload offload = Offload::None;
  Recompute recompute = Recompute::None;
  Placement placement = Placement::Device;  // Auto: the "+auto" rows of --max-model
};

// DDP, ZeRO-1, ZeRO-2, ZeRO-3, ZeRO-2+offload_opt, ZeRO-3+offload_all, each with recompute
// none, selective and full (18 options).
std::vector<MemoryOption> standard_options();

// The option's name for a setup's own stage/offload ("ZeRO-1+offload_opt" and so on).
std::string option_name(int zero_stage, Offload offload);

TrainSetup with_option(TrainSetup setup, const MemoryOption& option);

struct OptionResult {
  MemoryOption option;
  MemoryEstimate estimate;
  bool fits_gpu = true;
  bool fits_host = true;
  bool configured = false;  // the option the setup itself asks for
  bool fits() const { return fits_gpu && fits_host; }
};

// Estimates the setup under every standard option (and under its own option, when that is not
// one of them). Throws a tide::Error when the setup is impossible.
std::vector<OptionResult> compare_options(const TrainSetup& setup, const MachineBudget& budget);

// How --max-model grows a model. Vocabulary, sequence length and head size stay those of the
// given model.
//   Hidden: n_embd = 128 k (k = 1, 2, ...), n_head = n_embd / head_size, n_layer fixed.
//   Layers: n_layer = k * pp * virtual_stages, n_embd and n_head fixed.
// Shapes that violate the parallel layout (heads not divisible by tp, ...) are skipped.
enum class GrowthFamily { Hidden, Layers };
GrowthFamily parse_growth_family(const std::string& s);
std::string to_string(GrowthFamily f);

struct MaxModelResult {
  MemoryOption option;
  bool found = false;  // false: even the smallest shape of the family does not fit
  GPTConfig model;     // the largest shape that fits
  MemoryEstimate estimate;
};

// The largest model of the family that fits the budget under each standard option, and, when
// the budget has a host, under placement.policy=auto at the setup's ZeRO stage with each
// recompute policy (PatrickStar: the model states spread over the GPU and the host; the setup's
// placement.device_memory_limit, or the default budget of an empty GPU of budget.gpu_bytes,
// memory/allocator.h). Needs a GPU budget. Memory grows with k, so the search is a bisection
// over the valid shapes.
std::vector<MaxModelResult> find_max_models(const TrainSetup& setup, const MachineBudget& budget,
                                            GrowthFamily family);

}  // namespace tide
