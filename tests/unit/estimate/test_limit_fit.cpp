// placement.device_memory_limit and placement.policy=auto in `tide estimate` (estimate/
// limit_fit.h): the figures for a small model computed here by hand from the runtime's chunk
// layout (its tensors and chunks, grouped into blocks by name), the text lines and JSON keys,
// "does not fit" under the least limit, and the errors auto's settings give.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tide/core/byte_size.h"
#include "tide/core/error.h"
#include "tide/estimate/report.h"
#include "tide/model/layout.h"

using namespace tide;

namespace {

// L=2 C=32 V=64 T=16, micro-batch 2, fp32 AdamW, 0.01 MiB chunks (2621 elements: the 3072- and
// 4096-element matrices get a chunk each, the small tensors share).
TrainSetup small_setup(int zero_stage = 0, int world = 1) {
  TrainSetup s;
  s.model.n_layer = 2;
  s.model.n_embd = 32;
  s.model.n_head = 4;
  s.model.vocab_size = 64;
  s.model.max_seq_len = 16;
  s.micro_batch = 2;
  s.precision = Precision::FP32;
  s.chunk_mib = 0.01;
  s.zero_stage = zero_stage;
  s.world_size = world;
  return s;
}

int64_t align64(int64_t bytes) {
  return (bytes + 63) / 64 * 64;
}

struct Hand {
  int64_t states = 0;         // every kind this rank allocates
  int64_t largest_group = 0;  // chunk bytes of the group access needing the most
};

// From the layout the runtime packs: fp32 AdamW keeps PARAM (master aliases it), GRAD, ADAM_M and
// ADAM_V, 4 bytes each; ZeRO stage k slices m, v (k >= 1), GRAD (k >= 2), PARAM (k >= 3).
Hand by_hand(const TrainSetup& s) {
  ChunkLayout lay = make_layout(s.model, RankCoords{1, 0, 1, 0});
  const int dp = s.dp(), k = s.zero_stage;
  lay.pack(s.chunk_target_elems(), dp);
  auto bytes = [&](int c, bool sliced) {
    return align64((sliced ? lay.chunk_elems(c) / dp : lay.chunk_elems(c)) * 4);
  };
  Hand h;
  for (int c = 0; c < lay.num_chunks(); ++c)
    h.states += bytes(c, k >= 3) + bytes(c, k >= 2) + 2 * bytes(c, k >= 1);
  // Groups by name: embedding (wte, wpe), head (ln_f.*, the tied wte), and per layer l the ops'
  // groups ln_1 + attn.c_attn, attn.c_proj, ln_2 + mlp.c_fc, mlp.c_proj.
  std::map<std::string, std::set<int>> blocks;
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const std::string& n = lay.slot(id).name;
    const int c = lay.slot(id).chunk;
    if (n == "wte" || n == "wpe") blocks["embed"].insert(c);
    if (n == "wte" || n.starts_with("ln_f")) blocks["head"].insert(c);
    if (!n.starts_with("h.")) continue;
    const std::string layer = n.substr(0, n.find('.', 2));
    const bool attn = n.find("ln_1") != std::string::npos || n.find("c_attn") != std::string::npos;
    const bool fc = n.find("ln_2") != std::string::npos || n.find("c_fc") != std::string::npos;
    const bool proj = n.find("attn.c_proj") != std::string::npos;
    blocks[layer + (attn ? "/attn" : proj ? "/proj" : fc ? "/fc" : "/fc2")].insert(c);
  }
  EXPECT_EQ(blocks.size(), 10u);
  for (const auto& [name, chunks] : blocks) {
    int64_t param = 0, grad = 0;
    for (int c : chunks) param += bytes(c, k >= 3), grad += bytes(c, k >= 2);
    if (k >= 3 && dp >= 2) param = 0;  // F and B read ZeRO-3's gathered buffers
    h.largest_group = std::max({h.largest_group, param, grad});
  }
  return h;
}

}  // namespace

TEST(LimitFit, DeviceLimitOverAndUnder) {
  TrainSetup s = small_setup();
  const int64_t total = estimate_memory(s).device.total();
  for (int64_t delta : {-1000, 0, 1000}) {
    s.device_memory_limit = total + delta;
    const MemoryEstimate e = estimate_memory(s);
    EXPECT_EQ(e.device.total(), total);  // placement=device moves nothing
    EXPECT_EQ(e.limit.limit, total + delta);
    EXPECT_EQ(e.limit.device_total, total);
    EXPECT_EQ(e.limit.margin(), delta);
    EXPECT_EQ(e.limit.fits(), delta >= 0);
    const std::string line = limit_fit_text(e.limit);
    if (delta < 0) {
      EXPECT_NE(line.find("over it by 1000 B"), std::string::npos) << line;
      EXPECT_NE(line.find("fails at its first allocation past the limit"), std::string::npos)
          << line;
    } else {
      EXPECT_NE(line.find(fmt::format("fits, {} B under it", delta)), std::string::npos) << line;
    }
  }
  s.device_memory_limit = 0;
  EXPECT_EQ(estimate_memory(s).limit.limit, 0);
  EXPECT_EQ(limit_fit_text(estimate_memory(s).limit), "");
}

TEST(LimitFit, AutoSplitsTheStatesByHand) {
  for (auto [stage, world] : {std::pair{0, 1}, {1, 2}, {2, 2}, {3, 2}, {3, 1}}) {
    const std::string what = fmt::format("stage {}, world {}", stage, world);
    TrainSetup s = small_setup(stage, world);
    const Hand h = by_hand(s);
    const MemoryEstimate dev = estimate_memory(s);  // placement=device: every state on the GPU
    ASSERT_EQ(dev.device.model_states() + dev.device.chunk_padding, h.states) << what;
    // On a GPU every arena is reserved whole from the budget before the first step.
    const int64_t non_model = dev.device.activations + dev.device.temp_buffers + dev.device.arenas;
    ASSERT_GT(h.largest_group, 0) << what;
    ASSERT_LT(h.largest_group, h.states / 2) << what;

    s.placement = Placement::Auto;
    for (int64_t room : {h.states / 2, h.states + 64, h.largest_group}) {
      s.device_memory_limit = non_model + room;
      const MemoryEstimate e = estimate_memory(s);
      const LimitFit& f = e.limit;
      const int64_t on_device = std::min(room, h.states);
      EXPECT_TRUE(f.auto_placement) << what;
      EXPECT_EQ(f.states, h.states) << what;
      EXPECT_EQ(f.non_model, non_model) << what;
      EXPECT_EQ(f.largest_group, h.largest_group) << what;
      EXPECT_EQ(f.least_limit, non_model + h.largest_group) << what;
      EXPECT_EQ(f.states_on_device, on_device) << what;
      EXPECT_EQ(f.states_on_host, h.states - on_device) << what;
      EXPECT_EQ(f.least_moved, h.states - on_device) << what;
      EXPECT_TRUE(f.fits()) << what;
      EXPECT_EQ(f.device_total, dev.device.total()) << what;  // the policy=device figure
      // The device figure is the budget at most; the rest of the states is on the host.
      EXPECT_EQ(e.device.arenas, dev.device.arenas) << what;
      EXPECT_EQ(e.device.total(), non_model + on_device) << what;
      EXPECT_LE(e.device.total(), s.device_memory_limit) << what;
      EXPECT_EQ(e.host_per_rank.total(), h.states - on_device) << what;
      EXPECT_EQ(e.host.total(), world * (h.states - on_device)) << what;  // 2 ranks a host
      // A page-locked host tier on a device is counted as every state (AutoPlacement caches
      // what a chunk moved to the device left: the host keeps every chunk that has been there).
      TrainSetup pinned = s;
      pinned.on_device = pinned.pinned_host_tier = true;
      const MemoryEstimate p = estimate_memory(pinned);
      EXPECT_GT(p.limit.states_on_device, 0) << what;
      EXPECT_EQ(p.host_per_rank.total() - p.host_per_rank.temp_buffers, h.states) << what;
      EXPECT_EQ(e.device.activations, dev.device.activations) << what;
      if (room == h.states / 2)  // Adam's states go first: v, then m
        EXPECT_EQ(e.host_per_rank.adam_v, dev.device.adam_v) << what;
    }
  }
}

TEST(LimitFit, AutoUnderTheLeastDoesNotFit) {
  TrainSetup s = small_setup();
  s.placement = Placement::Auto;
  s.device_memory_limit = 1LL << 30;
  const int64_t least = estimate_memory(s).limit.least_limit;
  s.device_memory_limit = least;
  EXPECT_TRUE(estimate_memory(s).limit.fits());
  EXPECT_NE(limit_fit_text(estimate_memory(s).limit).find("placement auto: fits"),
            std::string::npos);
  s.device_memory_limit = least - 1;
  const MemoryEstimate e = estimate_memory(s);
  EXPECT_FALSE(e.limit.fits());
  const std::string text = limit_fit_text(e.limit);
  EXPECT_NE(text.find("placement auto: does not fit"), std::string::npos) << text;
  EXPECT_NE(text.find("under the least auto needs, " + format_bytes(least)), std::string::npos)
      << text;
  // The whole report: the configured row's lines follow the table.
  const auto rows = compare_options(s, {});
  EXPECT_NE(options_table_text(s, {}, rows).find("placement auto: does not fit"),
            std::string::npos);
}

// Under pipeline parallelism every stage's rank places its own store within the limit: the fit
// shown is the stage that needs the largest limit, each stage's states beyond its room go to
// its host, and the device figure is the largest stage's after the move.
TEST(LimitFit, AutoUnderPipelineStagesFitsEachStage) {
  TrainSetup s = small_setup();
  s.model.n_layer = 4;
  s.pp = s.world_size = 2;
  s.grad_accum = 4;
  s.model.vocab_size = 4096;  // the last stage's logits make it the one that sets the least
  const MemoryEstimate dev = estimate_memory(s);
  ASSERT_EQ(dev.stages.size(), 2u);
  int64_t least = 0, states = 0, binding = -1;
  for (const StageEstimate& st : dev.stages) {
    const int64_t l =
        st.device.activations + st.device.temp_buffers + st.device.arenas + st.largest_group_chunks;
    if (l > least) least = l, states = st.device.model_states() + st.device.chunk_padding;
    if (l == least) binding = st.stage;
  }
  ASSERT_EQ(binding, 1) << "the case needs a binding stage other than the first";
  s.placement = Placement::Auto;
  s.device_memory_limit = least;
  const MemoryEstimate e = estimate_memory(s);
  EXPECT_EQ(e.limit.least_limit, least);
  EXPECT_EQ(e.limit.states, states);
  EXPECT_TRUE(e.limit.fits());
  for (size_t i = 0; i < e.stages.size(); ++i) {
    const StageEstimate& st = e.stages[i];
    const int64_t room = std::max<int64_t>(0, s.device_memory_limit - st.device.activations -
                                                  st.device.temp_buffers - st.device.arenas);
    EXPECT_LE(st.device.model_states() + st.device.chunk_padding, room) << "stage " << i;
    EXPECT_EQ(st.device.model_states() + st.device.chunk_padding + st.host.model_states() +
                  st.host.chunk_padding,
              dev.stages[i].device.model_states() + dev.stages[i].device.chunk_padding)
        << "stage " << i << ": every state is on one tier";
  }
  s.device_memory_limit = least - 1;
  EXPECT_FALSE(estimate_memory(s).limit.fits());
}

TEST(LimitFit, JsonKeys) {
  TrainSetup s = small_setup();
  s.placement = Placement::Auto;
  s.device_memory_limit = 200000;
  const auto rows = compare_options(s, {});
  const nlohmann::json j = nlohmann::json::parse(options_table_json(s, {}, rows).dump());
  EXPECT_EQ(j["setup"]["placement"], "auto");
  EXPECT_EQ(j["setup"]["device_memory_limit"], 200000);
  int configured = 0;
  for (const auto& o : j["options"]) {
    const auto& l = o["device_memory_limit"];
    ASSERT_TRUE(l.is_object()) << o["option"];
    EXPECT_EQ(l["limit"], 200000);
    for (const char* key : {"policy", "device_total", "device_fits", "margin", "fits"})
      EXPECT_TRUE(l.contains(key)) << key;
    if (o["offload"] != "none") {  // auto refuses offload: those rows are placement=device
      EXPECT_EQ(l["policy"], "device");
      continue;
    }
    EXPECT_EQ(l["policy"], "auto");
    for (const char* key : {"states", "non_model", "states_on_device", "states_on_host",
                            "largest_group_chunks", "least_limit", "least_moved_per_step", "fits"})
      EXPECT_TRUE(l["auto"].contains(key)) << key;
    EXPECT_EQ(l["auto"]["states_on_host"].get<int64_t>(), o["host"]["total"].get<int64_t>());
    configured += o["configured"].get<bool>();
  }
  EXPECT_EQ(configured, 1);
  s.placement = Placement::Device;
  s.device_memory_limit = 0;
  const nlohmann::json none =
      nlohmann::json::parse(options_table_json(s, {}, compare_options(s, {})).dump());
  EXPECT_TRUE(none["options"][0]["device_memory_limit"].is_null());
}

// The auto settings' errors are the config's (train/test_estimate_setup_errors.cpp); the
// enum's names:
TEST(LimitFit, PlacementNames) {
  EXPECT_THROW(parse_placement("gpu"), Error);
  EXPECT_EQ(parse_placement("auto"), Placement::Auto);
}
