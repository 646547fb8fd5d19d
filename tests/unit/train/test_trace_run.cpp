// `trace.steps`: a Chrome trace of real training steps. After one untraced warm-up step, the
// next N steps are recorded; every block's forward, backward and weight-gradient parts of every
// micro-batch appear nested in their step's span, with the optimizer; and tracing changes no
// bit of training.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "test_files.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

using namespace tide;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> run_overrides(const std::string& dir) {
  return {"data.train=" + test::write_pattern_shard(dir, "train.bin", 3000, 40),
          "model.vocab_size=40",
          "model.n_layer=2",
          "model.n_head=2",
          "model.n_embd=16",
          "model.dropout=0.1",
          "seq_len=8",
          "train_micro_batch_size_per_gpu=2",
          "gradient_accumulation_steps=2",
          "train_steps=5",
          "log.progress=false",
          "out_dir=" + dir};
}

bool inside(const json& e, const json& outer) {
  const double ts = e["ts"], dur = e["dur"], ots = outer["ts"], odur = outer["dur"];
  // The writer prints 3 decimals (ns): allow that rounding.
  return ts >= ots - 0.002 && ts + dur <= ots + odur + 0.002;
}

}  // namespace

TEST(TraceRun, TracesStepsAfterTheWarmUpWithEveryBlockPartNestedInItsStep) {
  const std::string dir = test::temp_dir("trace");
  auto o = run_overrides(dir);
  o.push_back("trace.steps=2");
  Trainer t(load_train_config("", o));
  const std::string path = dir + "/trace.json";
  for (int s = 0; s < 2; ++s) t.train_step();
  EXPECT_FALSE(fs::exists(path)) << "written before its last traced step";
  t.train_step();  // step 3: the window (steps 2 and 3) is complete
  ASSERT_TRUE(fs::exists(path));
  const json j = json::parse(std::ifstream(path));
  std::vector<json> steps, parts, others;
  for (const json& e : j.at("traceEvents")) {
    if (e["ph"] == "M") continue;
    ASSERT_EQ(e["ph"], "X");
    EXPECT_EQ(e["pid"], 0);
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    if (e["name"] == "step")
      steps.push_back(e);
    else if (e["cat"] == "compute")
      parts.push_back(e);
    else
      others.push_back(e);
  }
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0]["args"]["step"], 2);  // step 1 is the warm-up
  EXPECT_EQ(steps[1]["args"]["step"], 3);
  const int blocks = t.model().num_blocks(), micro_batches = 2;
  for (const json& step : steps) {
    // (part, block, micro-batch) -> count, for the parts inside this step.
    std::map<std::tuple<std::string, int, int>, int> seen;
    for (const json& p : parts)
      if (inside(p, step)) ++seen[{p["name"], p["args"]["block"], p["args"]["mb"]}];
    for (const char* part : {"forward", "backward", "weight"})
      for (int b = 0; b < blocks; ++b)
        for (int m = 0; m < micro_batches; ++m)
          EXPECT_EQ((seen[{part, b, m}]), 1)
              << part << " block " << b << " mb " << m << " in step " << step["args"]["step"];
    EXPECT_EQ(seen.size(), size_t{3} * blocks * micro_batches);
    std::set<std::string> names;
    for (const json& e : others)
      if (inside(e, step)) names.insert(e["name"]);
    for (const char* n : {"F", "B", "W", "finish gradients", "grad norm", "optimizer"})
      EXPECT_TRUE(names.count(n)) << n << " missing in step " << step["args"]["step"];
  }
  // Every part lies in one of the two steps: nothing from the warm-up or after the window.
  for (const json& p : parts) EXPECT_TRUE(inside(p, steps[0]) || inside(p, steps[1]));
  t.train_step();
  EXPECT_EQ(json::parse(std::ifstream(path)).at("traceEvents").size(), j.at("traceEvents").size())
      << "the trace is written once";
}

TEST(TraceRun, TracingChangesNoBitOfTraining) {
  std::vector<std::vector<float>> curves;
  std::vector<std::vector<char>> params;
  for (int traced : {0, 1}) {
    const std::string dir = test::temp_dir(traced ? "traced" : "plain");
    auto o = run_overrides(dir);
    if (traced) o.push_back("trace.steps=3");
    Trainer t(load_train_config("", o));
    std::vector<float> curve;
    for (int s = 0; s < 5; ++s) {
      const StepStats st = t.train_step();
      curve.push_back(st.loss);
      curve.push_back(static_cast<float>(st.grad_norm));
    }
    curves.push_back(curve);
    std::vector<char> bytes;
    const ChunkStore& store = t.model().store();
    for (int c = 0; c < store.layout().num_chunks(); ++c)
      for (ChunkKind k : {ChunkKind::PARAM, ChunkKind::ADAM_M, ChunkKind::ADAM_V}) {
        const Tensor x = store.chunk(k, c);
        const char* p = static_cast<const char*>(x.data);
        bytes.insert(bytes.end(), p, p + x.nbytes());
      }
    params.push_back(bytes);
    EXPECT_EQ(fs::exists(dir + "/trace.json"), traced == 1);
  }
  EXPECT_EQ(std::memcmp(curves[0].data(), curves[1].data(), curves[0].size() * 4), 0);
  ASSERT_EQ(params[0].size(), params[1].size());
  EXPECT_TRUE(params[0] == params[1]) << "the weights or optimizer state differ";
}

TEST(TraceRun, ATraceCutShortByTrainStepsIsWrittenAtTheEndOfTheRun) {
  const std::string dir = test::temp_dir("short");
  auto o = run_overrides(dir);
  o.push_back("trace.steps=10");
  o.push_back("trace.path=" + dir + "/sub/my_trace.json");
  o.push_back("train_steps=3");
  Trainer(load_train_config("", o)).run();
  const json j = json::parse(std::ifstream(dir + "/sub/my_trace.json"));
  int steps = 0;
  for (const json& e : j.at("traceEvents")) steps += e["name"] == "step";
  EXPECT_EQ(steps, 2);  // steps 2 and 3
}

TEST(TraceRun, UnwritablePathsAreErrorsBeforeAnythingIsWritten) {
  const std::string dir = test::temp_dir("unwritable");
  std::ofstream(dir + "/a_file") << "x";  // a directory cannot be made below a file
  for (const std::string& bad : {"trace.path=" + dir + "/a_file/sub/trace.json",
                                 "tensorboard.output_path=" + dir + "/a_file/tb"}) {
    auto o = run_overrides(dir);
    o.push_back("out_dir=" + dir + "/out");
    o.push_back(bad.starts_with("trace") ? "trace.steps=1" : "tensorboard.enabled=true");
    o.push_back(bad);
    std::string error;
    try {
      Trainer(load_train_config("", o)).run();
    } catch (const Error& e) {
      error = e.what();
    }
    const std::string key = bad.substr(0, bad.find('='));
    EXPECT_NE(error.find(key + " '"), std::string::npos) << error;
    EXPECT_FALSE(fs::exists(dir + "/out/config.json")) << key;
    EXPECT_FALSE(fs::exists(dir + "/out/metrics.jsonl")) << key;
    EXPECT_FALSE(fs::exists(dir + "/config.json")) << key;
  }
}
