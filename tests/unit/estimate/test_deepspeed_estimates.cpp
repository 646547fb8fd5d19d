// tide's per-GPU estimate for large GPT models and Llama 3.1 8B against DeepSpeed's own
// estimator (estimate_zero2/3_model_states_mem_needs, run from DeepSpeed's source by
// tools/gen_deepspeed_estimates.py into tests/fixtures/deepspeed_estimates.json): issues #11
// and #28 ask for agreement within 1.1x, or an explained difference. DeepSpeed's functions count
// model states plus (stage 3) one largest layer in fp32 bytes, so tide's side is model states +
// chunk padding + ZeRO's communication buffers, bf16, no offload, no activations.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "tide/estimate/memory_estimate.h"

using namespace tide;
using json = nlohmann::json;

namespace {

json load_fixture() {
  std::ifstream f(std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/deepspeed_estimates.json");
  EXPECT_TRUE(f.good()) << "tests/fixtures/deepspeed_estimates.json is missing";
  return json::parse(f);
}

TrainSetup setup_of(const json& c, int stage) {
  TrainSetup s;
  if (c.contains("preset")) {  // the Llama family: tide's preset of the same published shape
    s.model = GPTConfig::preset(c["preset"]);
    EXPECT_EQ(s.model.n_layer, c["n_layer"]);
    EXPECT_EQ(s.model.kv_heads(), c["n_kv_head"]);
    EXPECT_EQ(s.model.ffn_size(), c["intermediate_size"].get<int64_t>());
    s.seq_len = c["seq_len"];
  } else {
    s.model.n_layer = c["n_layer"];
    s.model.n_head = c["n_head"];
    s.model.n_embd = c["n_embd"];
    s.model.vocab_size = c["vocab_size"];
    s.model.max_seq_len = c["seq_len"];
  }
  s.world_size = c["nd"];
  s.zero_stage = stage;
  s.precision = Precision::BF16;  // DeepSpeed's 16-bit params and grads, fp32 master and Adam
  s.optimizer = Optimizer::AdamW;
  s.micro_batch = 1;
  s.grad_accum = 1;
  return s;
}

struct Row {
  std::string model;
  int nd = 0, stage = 0;
  double states = 0, padding = 0, buffers = 0, tide = 0, deepspeed = 0;
  double deepspeed_states = 0;  // DeepSpeed's total less its largest-layer term (stage 3)
  int buffer_count = 0;
};

double gib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

std::vector<Row> compare_all() {
  std::vector<Row> rows;
  const json fixture = load_fixture();
  for (const json& c : fixture["cases"]) {
    for (int stage : {2, 3}) {
      const TrainSetup s = setup_of(c, stage);
      // The fixture's parameter count is DeepSpeed's model_to_params on the same shape, computed
      // in Python from the module list: tide's count of its own tensors must be the same.
      EXPECT_EQ(s.model.num_parameters(), c["total_params"].get<int64_t>()) << c["name"];
      const MemoryEstimate e = estimate_memory(s);
      Row r;
      r.model = c["name"];
      r.nd = c["nd"];
      r.stage = stage;
      r.states = gib(e.device.model_states());
      r.padding = gib(e.device.chunk_padding);
      // ZeRO's communication buffers only: the rest of temp (the backward's and the
      // recomputation's workspaces) is activation memory, which DeepSpeed's functions leave out.
      const ZeroBufferPeak& b = e.stages[e.peak_stage].comm_buffers;
      r.buffers = gib(b.bytes);
      r.buffer_count = b.buffers;
      r.tide = gib(e.device.model_states() + e.device.chunk_padding + b.bytes);
      const json& ds = c[stage == 2 ? "zero2" : "zero3"];
      r.deepspeed = gib(ds["gpu_bytes"].get<int64_t>());
      r.deepspeed_states =
          gib(ds["gpu_bytes"].get<int64_t>() - ds.value("largest_layer_bytes", int64_t{0}));
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace

TEST(DeepSpeedEstimates, PerGpuTotalsAgainstDeepSpeedsEstimator) {
  const std::vector<Row> rows = compare_all();
  ASSERT_EQ(rows.size(), 28u);  // 3 GPT shapes x 4 Nd and Llama 3.1 8B x 2, ZeRO-2 and 3
  std::printf(
      "| model | Nd | ZeRO | tide states | padding | buffers (n) | tide total | DeepSpeed | "
      "ratio |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %d | %d | %.2f | %.2f | %.2f (%d) | %.2f | %.2f | %.2f |\n",
                r.model.c_str(), r.nd, r.stage, r.states, r.padding, r.buffers, r.buffer_count,
                r.tide, r.deepspeed, r.tide / r.deepspeed);

  // Where tide is above 1.1x it is the communication buffers alone, and the cause is
  // DeepSpeed's default reduce_bucket_size (5e8 elements, 0.93 GiB in bf16), which its
  // estimator leaves out and its runtime allocates (the ipg bucket): at 7.5B every chunk holds
  // ~151M elements (one op group is at most 38M; the embedding's 158M sets the chunk size), so
  // the bucket lets 3 gradient chunks be reduced in flight, beside the tied embedding's
  // gradient (held from the head's W to the embedding's) and the chunk being written. At 128B
  // and 1T the chunks (an op's parameters) are larger than the bucket and are reduced one at a
  // time: per-op gathering (model/param_groups.h) brought stage 3 at Nd=1024 from 2.26x and
  // 2.14x (whole blocks gathered) to 0.96x and 0.93x. docs/estimate.md has the table. The list
  // is checked both ways: a case that comes within 1.1x must leave it; and each has a bound on
  // its ratio, so that buffers growing back fail.
  struct Above {
    double bound;  // tide total / DeepSpeed's at most
    const char* why;
  };
  const std::map<std::tuple<std::string, int, int>, Above> above = {
      {{"gpt-7.5b", 64, 3},
       {1.40,
        "8 buffers, at the peak 6 gradient chunks (the tied embedding's, those in the 5e8 "
        "reduce bucket, the one being written) and 2 gathered: 1.76 GiB beside 1.72 of states"}},
      {{"gpt-7.5b", 1024, 2},
       {1.11,
        "6 gradient chunks of ~151M: the tied embedding's, those in the 5e8 reduce bucket, "
        "those being written"}},
      {{"llama3.1-8b", 64, 3},
       {1.25,
        "3 buffers of whole 525M-element chunks (the untied embedding's and head's size; a "
        "chunk holds two layers), 2.94 GiB in bf16 (at the peak 2 gradient chunks, the one "
        "written and the one reduced, and 1 gathered), against DeepSpeed's one largest layer "
        "in fp32, 1.96 GiB; at Nd=8 (one node) tide is 0.95x"}},
      {{"gpt-7.5b", 1024, 3},
       {2.69,
        "DeepSpeed's default reduce_bucket_size (5e8 elements, 0.93 GiB in bf16) alone is "
        "above DeepSpeed's whole figure (0.70 GiB); its runtime has that bucket too"}}};
  for (const Row& r : rows) {
    const std::string what = fmt::format("{} Nd={} ZeRO-{}", r.model, r.nd, r.stage);
    // Model states: ZeRO's 2 + 2 + 12 bytes per parameter (partitioned as the stage says) plus
    // chunk padding, below DeepSpeed's 2 + 18 (it also counts a 4-byte fp32 gradient copy).
    EXPECT_LE(r.states + r.padding, r.deepspeed_states) << what;
    EXPECT_GT(r.states + r.padding, 0.75 * r.deepspeed_states) << what;
    if (const auto a = above.find({r.model, r.nd, r.stage}); a != above.end()) {
      EXPECT_GT(r.tide, 1.1 * r.deepspeed) << what << " now agrees: take it off the list";
      EXPECT_LE(r.tide - r.buffers, 1.1 * r.deepspeed) << what;
      EXPECT_LE(r.tide, a->second.bound * r.deepspeed) << what << ": " << a->second.why;
    } else {
      EXPECT_LE(r.tide, 1.1 * r.deepspeed) << what;
    }
  }
}

// The 7.5B rows above 1.1x, set up as DeepSpeed's estimator assumes its buffers to be: nothing
// but one layer's 16-bit parameters and gradients, so no gradient waiting in a reduce bucket
// (reduce_bucket_size 1: each chunk reduced at once) and no prefetch, with chunks of one op's
// parameters (chunk_size_mb = the MLP's ln_2 + c_fc group, 4h^2 + 6h elements). Then tide is
// within 1.1x there too: the difference in the table is DeepSpeed's default reduce bucket.
TEST(DeepSpeedEstimates, SevenBWithoutInFlightBucketsIsWithinTheBound) {
  const json fixture = load_fixture();
  int checked = 0;
  for (const json& c : fixture["cases"]) {
    if (c["name"] != "gpt-7.5b" || c["nd"].get<int>() < 64) continue;
    for (int stage : {2, 3}) {
      TrainSetup s = setup_of(c, stage);
      const int64_t h = s.model.n_embd;
      s.chunk_mib = static_cast<double>(4 * h * h + 6 * h) * 4 / 1048576.0;
      s.zero.reduce_bucket_size = 1;
      s.zero.prefetch_bucket_size = 0;
      const MemoryEstimate e = estimate_memory(s);
      const int64_t tide = e.device.model_states() + e.device.chunk_padding +
                           e.stages[e.peak_stage].comm_buffers.bytes;
      const double ds =
          static_cast<double>(c[stage == 2 ? "zero2" : "zero3"]["gpu_bytes"].get<int64_t>());
      std::printf(
          "gpt-7.5b Nd=%d ZeRO-%d without in-flight buckets: %.2f GiB, DeepSpeed %.2f, ratio "
          "%.2f\n",
          c["nd"].get<int>(), stage, gib(tide), gib(static_cast<int64_t>(ds)), tide / ds);
      EXPECT_LE(tide, 1.1 * ds) << "Nd=" << c["nd"] << " ZeRO-" << stage;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4);
}
