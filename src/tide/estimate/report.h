#pragma once
// Rendering of `tide estimate` results: a plain-text table for people, JSON for tools.
// The columns are documented in docs/estimate.md.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tide/estimate/compare_options.h"

namespace tide {

nlohmann::json breakdown_json(const MemoryBreakdown& b);  // bytes per category and "total"
nlohmann::json setup_json(const TrainSetup& s);
// A stage's chunk facts: count, target, largest, total and per-rank (owned) elements.
nlohmann::json chunk_plan_json(const ChunkPlan& p);
// placement.device_memory_limit against the option's device total (and auto's split); null
// without a limit. The text: one line for placement=device, three for auto; "" without a limit.
nlohmann::json limit_fit_json(const LimitFit& f);
std::string limit_fit_text(const LimitFit& f);

std::string options_table_text(const TrainSetup& setup, const MachineBudget& budget,
                               const std::vector<OptionResult>& rows);
nlohmann::json options_table_json(const TrainSetup& setup, const MachineBudget& budget,
                                  const std::vector<OptionResult>& rows);

std::string max_model_text(const TrainSetup& setup, const MachineBudget& budget,
                           GrowthFamily family, const std::vector<MaxModelResult>& rows);
nlohmann::json max_model_json(const TrainSetup& setup, const MachineBudget& budget,
                              GrowthFamily family, const std::vector<MaxModelResult>& rows);

}  // namespace tide
