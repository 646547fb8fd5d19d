#include "tide/model/param_groups.h"

#include <fmt/format.h>

#include <set>
#include <string>

#include "tide/core/error.h"
#include "tide/model/layout.h"

namespace tide {

std::vector<int> BlockGroups::ids() const {
  std::vector<int> all;
  for (const auto& g : groups) all.insert(all.end(), g.begin(), g.end());
  return all;
}

std::vector<BlockGroups> block_groups(const ChunkLayout& layout) {
  std::vector<BlockGroups> blocks;
  const int wte = layout.index_of("wte"), wpe = layout.index_of("wpe");
  if (wte >= 0 && wpe >= 0)
    blocks.push_back({BlockGroups::Kind::EMBEDDING, {{wte, wpe}}, {{wte, wpe}}});
  else if (wte >= 0)  // the Llama family: no position embedding
    blocks.push_back({BlockGroups::Kind::EMBEDDING, {{wte}}, {{wte}}});
  std::set<int> layers;  // the layer indices present (a pipeline stage holds a range)
  for (int id = 0; id < layout.num_tensors(); ++id) {
    const std::string& name = layout.slot(id).name;
    if (name.starts_with("h.")) layers.insert(std::stoi(name.substr(2, name.find('.', 2) - 2)));
  }
  for (int l : layers) {
    BlockGroups b;
    if (layout.index_of(fmt::format("h.{}.{}", l, kLayerParamNames[0])) < 0) {
      // The Llama family (layout.h): its names, the optional qkv bias left out when absent.
      for (int k = 0; k < 4; ++k) {
        std::vector<int> g;
        for (int i = kLlamaLayerGroupBegin[k]; i < (k < 3 ? kLlamaLayerGroupBegin[k + 1] : 7);
             ++i) {
          const std::string name = fmt::format("h.{}.{}", l, kLlamaLayerParamNames[i]);
          if (i == 2 && layout.index_of(name) < 0) continue;  // no qkv bias
          g.push_back(layout.find(name));
        }
        b.groups.push_back(g);
        b.grads_done.push_back(g);
      }
      blocks.push_back(std::move(b));
      continue;
    }
    for (int k = 0; k < 4; ++k) {
      std::vector<int> g;
      for (int i = kLayerGroupBegin[k]; i < (k < 3 ? kLayerGroupBegin[k + 1] : 12); ++i)
        g.push_back(layout.find(fmt::format("h.{}.{}", l, kLayerParamNames[i])));
      b.groups.push_back(g);
      b.grads_done.push_back(g);
    }
    blocks.push_back(std::move(b));
  }
  const int lnf_w = layout.index_of("ln_f.weight"), lnf_b = layout.index_of("ln_f.bias");
  if (lnf_w >= 0 && lnf_b < 0) {
    // The Llama family: ln_f.weight (RMSNorm) and the LM head weight: its own untied
    // output.weight, a later stage's tied copy lm_head.weight, or wte.
    const int untied = layout.index_of("output.weight");
    const int own = untied >= 0 ? untied : layout.index_of("lm_head.weight");
    const int head = own >= 0 ? own : wte;
    TIDE_CHECK(head >= 0, "the layout holds ln_f but no LM head weight");
    BlockGroups b{BlockGroups::Kind::HEAD, {{lnf_w, head}}, {{lnf_w}}};
    if (own >= 0) b.grads_done[0].push_back(own);
    blocks.push_back(std::move(b));
  } else if (lnf_w >= 0) {
    const int own = layout.index_of("lm_head.weight");
    const int head = own >= 0 ? own : wte;
    TIDE_CHECK(head >= 0, "the layout holds ln_f but neither wte nor lm_head.weight");
    BlockGroups b{BlockGroups::Kind::HEAD, {{lnf_w, lnf_b, head}}, {{lnf_w, lnf_b}}};
    if (own >= 0) b.grads_done[0].push_back(own);
    blocks.push_back(std::move(b));
  }
  return blocks;
}

std::span<const int> part_groups(const BlockGroups& b, Use use, ActivationPolicy policy) {
  static constexpr int kWhole[] = {0}, kForward[] = {0, 1, 2, 3}, kReverse[] = {3, 2, 1, 0},
                       kRecomputeThenReverse[] = {0, 1, 2, 3, 2, 1, 0};
  if (b.kind == BlockGroups::Kind::EMBEDDING && use == Use::BACKWARD) return {};
  if (!b.per_op()) return kWhole;
  if (use == Use::FORWARD) return kForward;
  if (use == Use::BACKWARD && policy == ActivationPolicy::FULL) return kRecomputeThenReverse;
  return kReverse;
}

ParamGroups::ParamGroups(const std::vector<BlockGroups>& blocks) {
  for (const BlockGroups& b : blocks) {
    first.push_back(static_cast<int>(ids.size()));
    ids.insert(ids.end(), b.groups.begin(), b.groups.end());
  }
}

}  // namespace tide
