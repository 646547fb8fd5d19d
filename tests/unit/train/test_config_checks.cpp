// "Nothing lost": the whole config is checked when it is parsed (ranges before narrowing, the
// optimizer and the schedule, paths), every problem comes as one clear line, and a run never
// overwrites the files of an earlier run in its out_dir by accident.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "error_of.h"
#include "test_files.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/config/check_settings.h"
#include "tide/config/estimate_setup.h"
#include "tide/core/rng.h"
#include "tide/data/shard.h"
#include "tide/parallel/zero.h"
#include "tide/train/trainer.h"

using namespace tide;
using tide::test::error_of;
using tide::test::temp_dir;
namespace fs = std::filesystem;

namespace {

std::string write_shard(const std::string& path, int n) {
  std::vector<uint16_t> tokens(n);
  const PhiloxStream rng{3, 4};
  for (int i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(rng.uint(i) % 30);
  write_token_shard(path, std::span<const uint16_t>(tokens));
  return path;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// A tiny run over a shard in `data_dir` writing into `out`.
std::vector<std::string> tiny_run(const std::string& data_dir, const std::string& out) {
  return {"data.train=" + write_shard(data_dir + "/train.bin", 2000),
          "model.vocab_size=30",
          "model.n_layer=1",
          "model.n_head=2",
          "model.n_embd=8",
          "seq_len=8",
          "train_micro_batch_size_per_gpu=2",
          "train_steps=2",
          "threads=1",
          "log.progress=false",
          "out_dir=" + out};
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The message of load_train_config(overrides) failing (parse time, before any Trainer).
std::string parse_error(const std::vector<std::string>& overrides) {
  return error_of([&] { load_train_config("", overrides); });
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

}  // namespace

TEST(ConfigChecks, OptimizerAndScheduleAreCheckedAtParseTime) {
  // Each of these used to pass parsing and fail only at the first optimizer step.
  EXPECT_HAS(parse_error({"optimizer.params.eps=0"}),
             "config key 'optimizer.params.eps' must be a number > 0 (got 0)");
  EXPECT_HAS(parse_error({"scheduler.params.cos_min_ratio=2"}),
             "config key 'scheduler.params.cos_min_ratio' must be a number in [0, 1] (got 2)");
  EXPECT_HAS(parse_error({"optimizer.params.lr=0"}), "'optimizer.params.lr' must be a number > 0");
  EXPECT_HAS(parse_error({"optimizer.params.lr=1e300"}), "'optimizer.params.lr' must be a number");
  EXPECT_HAS(parse_error({"optimizer.params.weight_decay=-0.1"}),
             "'optimizer.params.weight_decay' must be a number >= 0");
  EXPECT_HAS(parse_error({"optimizer.params.betas=[1.0,0.9]"}),
             "'optimizer.params.betas' must be a list of two numbers in [0, 1)");
  EXPECT_HAS(parse_error({"gradient_clipping=-1"}), "'gradient_clipping' must be a number >= 0");
  EXPECT_HAS(parse_error({"model.dropout=1"}), "'model.dropout' must be a number in [0, 1)");
  // DeepSpeed only warns when the warmup outlasts total_num_steps (tide runs it as DeepSpeed
  // does), but rejects warmup_num_steps <= 0.
  EXPECT_EQ(parse_error({"scheduler.params.warmup_num_steps=10", "train_steps=10"}), "");
  EXPECT_HAS(parse_error({"scheduler.params.warmup_num_steps=0"}),
             "warmup_num_steps must be a positive integer");
  EXPECT_HAS(parse_error({"scheduler.type=OneCycle"}),
             "scheduler.type 'OneCycle' is not supported");
  EXPECT_HAS(parse_error({"scheduler.params.warmup_type=exp"}), "use log or linear");
  EXPECT_HAS(parse_error({"scheduler.params.warmup_max_lr=-0.5"}), "or -1 for DeepSpeed's default");
  EXPECT_HAS(parse_error({"steps_per_print=5", "log.interval=7"}),
             "steps_per_print (5) and log.interval (7) are the same setting");
  EXPECT_HAS(parse_error({"model.n_embd=10", "model.n_head=4"}), "divisible by model.n_head");
  EXPECT_HAS(parse_error({"device=gpu"}), "use cpu, cuda, cuda:N, sim, sim:N or auto");
  EXPECT_EQ(parse_error({"scheduler.params.cos_min_ratio=1", "device=cuda:1"}), "");
}

TEST(ConfigChecks, IntegersAreRangeCheckedBeforeNarrowing) {
  EXPECT_HAS(parse_error({"train_micro_batch_size_per_gpu=4294967300"}),
             "config key 'train_micro_batch_size_per_gpu' must be an integer in [1, 65536] (got "
             "4294967300)");
  EXPECT_HAS(parse_error({"seq_len=99999999999"}),
             "config key 'seq_len' must be an integer in [1, 1048576] (got 99999999999)");
  EXPECT_HAS(parse_error({"threads=-3"}), "'threads' must be an integer in [0, 4096] (got -3)");
  EXPECT_HAS(parse_error({"eval.interval=-1"}), "'eval.interval' must be an integer >= 0 (got -1)");
  EXPECT_HAS(parse_error({"checkpoint.interval=-1"}),
             "'checkpoint.interval' must be an integer >= 0 (got -1)");
  EXPECT_HAS(parse_error({"train_steps=18446744073709551615"}), "'train_steps' must be an integer");
  EXPECT_HAS(parse_error({"train_steps=2.5"}), "'train_steps' must be an integer >= 1 (got 2.5)");
  EXPECT_HAS(parse_error({"zero_optimization.stage=7"}), "must be an integer in [0, 3]");
  // The uint64 seed: -1 is not a non-negative integer (not "got -1" for another reason).
  EXPECT_HAS(parse_error({"seed=-1"}), "config key 'seed' must be a non-negative integer (got -1)");
  EXPECT_HAS(parse_error({"seed=\"x\""}), "'seed' must be a non-negative integer");
  EXPECT_EQ(load_train_config("", {"seed=18446744073709551615"}).seed, UINT64_MAX);
  EXPECT_EQ(load_train_config("", {"train_micro_batch_size_per_gpu=65536"}).micro_batch, 65536);
}

TEST(ConfigChecks, GivenPathsMustExist) {
  const std::string dir = temp_dir("paths");
  const auto run = tiny_run(dir, dir + "/out");
  EXPECT_HAS(parse_error(plus(run, {"data.val=" + dir + "/nope.bin"})),
             "data.val '" + dir + "/nope.bin' does not exist");
  EXPECT_HAS(parse_error(plus(run, {"data.val=" + dir + "/*.val"})), "matches no files");
  EXPECT_HAS(parse_error(plus(run, {"data.train=" + dir + "/none.bin"})),
             "data.train '" + dir + "/none.bin' does not exist");
  EXPECT_HAS(parse_error(plus(run, {"data.train=" + dir})), "is a directory");
  EXPECT_HAS(parse_error(plus(run, {"data.dir=" + dir + "/missing"})), "does not exist");
  EXPECT_HAS(parse_error(plus(run, {"checkpoint.resume=" + dir + "/x.ckpt"})),
             "cannot open checkpoint '" + dir + "/x.ckpt'");
  // A data.dir without val.bin is fine (no validation): only an explicit data.val must exist.
  EXPECT_EQ(parse_error(plus(run, {"data.dir=" + dir})), "");
}

TEST(ConfigChecks, AllUnknownKeysInOneError) {
  const nlohmann::json ds = nlohmann::json::parse(R"({
    "train_micro_batch_size_per_gpu": 2,
    "steps_per_print": 10,
    "optimizer": {"type": "AdamW", "params": {"lrr": 1e-3, "beta": [0.9, 0.95]}},
    "scheduler": {"params": {"warmup_max_lr": 1e-3}},
    "zero_optimization": {"stage": 0, "elastic_checkpoint": true}
  })");
  const std::string e = error_of([&] { parse_train_config(ds); });
  // (steps_per_print and scheduler.params.warmup_max_lr were unknown here before tide had them;
  // zero_optimization.sub_group_size before it accepted DeepSpeed's keys that change nothing.)
  EXPECT_HAS(e, "3 unknown config keys");
  EXPECT_HAS(e, "'optimizer.params.lrr' (did you mean 'optimizer.params.lr'?)");
  EXPECT_HAS(e, "'optimizer.params.beta' (did you mean 'optimizer.params.betas'?)");
  EXPECT_HAS(e, "'zero_optimization.elastic_checkpoint'");
  // Overrides are counted with the file's keys.
  EXPECT_HAS(parse_error({"optimizer.params.lrr=1", "trian_steps=3"}),
             "2 unknown config keys: 'optimizer.params.lrr' (did you mean 'optimizer.params.lr'?), "
             "'trian_steps' (did you mean 'train_steps'?)");
}

TEST(ConfigChecks, ConfigFileShapesGiveOneClearLine) {
  const std::string dir = temp_dir("files");
  auto load_error = [&](const std::string& text, std::vector<std::string> overrides) {
    write(dir + "/c.json", text);
    const std::string e = error_of([&] { load_train_config(dir + "/c.json", overrides); });
    EXPECT_EQ(e.find("json.exception"), std::string::npos) << e;
    return e;
  };
  EXPECT_HAS(load_error("[1, 2]", {}), "holds a JSON array, not an object");
  EXPECT_HAS(load_error("[1, 2]", {"train_steps=3"}), "holds a JSON array, not an object");
  EXPECT_HAS(load_error(R"({"optimizer": 5})", {}),
             "config key 'optimizer' must be an object with keys inside");
  EXPECT_HAS(load_error(R"({"optimizer": 5})", {"optimizer.params.lr=1e-3"}),
             "config key 'optimizer' is 5 in the config file, so the override "
             "'optimizer.params.lr' cannot go inside it");
  EXPECT_HAS(load_error("{ nope", {}), "is not valid JSON: parse error");
  const std::string d = error_of([&] { load_train_config(dir, {}); });
  EXPECT_HAS(d, "config file '" + dir + "' is a directory");
  EXPECT_EQ(d.find("basic_filebuf"), std::string::npos) << d;
}

TEST(OutDir, AnEarlierRunIsNeverOverwrittenByAccident) {
  const std::string dir = temp_dir("outdir"), out = dir + "/out";
  fs::create_directories(out);
  write(out + "/metrics.jsonl", "{\"step\": 1, \"loss\": 9}\n");
  write(out + "/config.json", "{\"earlier\": true}\n");
  // A bad value fails at parse time: nothing in out_dir is touched.
  EXPECT_HAS(parse_error(plus(tiny_run(dir, out), {"optimizer.params.eps=0"})), "eps");
  // A good config refuses to start over the earlier run.
  {
    Trainer t(load_train_config("", tiny_run(dir, out)));
    const std::string e = error_of([&] { t.run(); });
    EXPECT_HAS(e,
               "out_dir '" + out + "' already holds an earlier run (metrics.jsonl, config.json)");
    EXPECT_HAS(e, "set out_dir_overwrite=true");
  }
  EXPECT_EQ(read(out + "/metrics.jsonl"), "{\"step\": 1, \"loss\": 9}\n");
  EXPECT_EQ(read(out + "/config.json"), "{\"earlier\": true}\n");
  // out_dir_overwrite=true replaces it; config.json goes through a temporary file.
  {
    Trainer t(load_train_config("", plus(tiny_run(dir, out), {"out_dir_overwrite=true"})));
    t.run();
  }
  EXPECT_EQ(read(out + "/metrics.jsonl").find("\"loss\": 9"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(read(out + "/config.json"))["train_steps"], 2);
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  // A resumed run continues in place and appends to metrics.jsonl (a longer run: on a new lr
  // schedule, as the cosine spans train_steps).
  const std::string before = read(out + "/metrics.jsonl");
  {
    Trainer t(load_train_config(
        "", plus(tiny_run(dir, out), {"train_steps=3", "checkpoint.resume=" + out + "/model.ckpt",
                                      "checkpoint.new_lr_schedule=true"})));
    t.run();
  }
  const std::string after = read(out + "/metrics.jsonl");
  EXPECT_EQ(after.substr(0, before.size()), before);
  EXPECT_HAS(after.substr(before.size()), "\"step\":3");
  // A model_step<N>.ckpt alone also marks an earlier run.
  const std::string out2 = dir + "/out2";
  fs::create_directories(out2);
  fs::copy_file(out + "/model.ckpt", out2 + "/model_step7.ckpt");
  Trainer t(load_train_config("", tiny_run(dir, out2)));
  EXPECT_HAS(error_of([&] { t.run(); }), "already holds an earlier run (model_step7.ckpt)");
}

TEST(OutDir, AFullDiskStopsTheRunInsteadOfLosingMetrics) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string dir = temp_dir("full"), out = dir + "/out";
  fs::create_directories(out);
  fs::create_symlink("/dev/full", out + "/metrics.jsonl");
  Trainer t(load_train_config("", plus(tiny_run(dir, out), {"out_dir_overwrite=true"})));
  EXPECT_HAS(error_of([&] { t.run(); }),
             "metrics.jsonl: writing a metrics line failed (disk full?)");
}

// zero_optimization: values tide cannot honour are errors naming the key and the fix.
TEST(ConfigChecks, ZeroSettingsThatCannotWorkAreClearErrors) {
  EXPECT_HAS(parse_error({"zero_optimization.contiguous_gradients=false"}),
             "zero_optimization.contiguous_gradients = false is not available");
  EXPECT_HAS(parse_error({"zero_optimization.stage=4"}), "zero_optimization.stage");
  GPTConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 64;
  m.max_seq_len = 8;
  GPT gpt(m, ActivationPolicy::SAVE_ALL, 0, true, 2);
  const ChunkLayout& lay = gpt.store().layout();
  const std::vector<std::vector<int>> groups = ParamGroups(gpt.all_block_groups()).ids;
  const int64_t chunk = lay.max_chunk_elems();
  auto error = [&](ZeroSettings s) {
    return error_of([&] { check_zero_settings(s, lay, groups); });
  };
  ZeroSettings ok;
  ok.stage = 3;
  EXPECT_EQ(error(ok), "");
  // Buckets smaller than a chunk run: such a chunk is reduced (gathered) alone, at once
  // (mpi.train_zero's SmallBuckets trains with them).
  ZeroSettings s = ok;
  s.reduce_bucket_size = s.allgather_bucket_size = chunk - 1;
  EXPECT_EQ(error(s), "");
  s = ok;
  s.max_live_parameters = chunk - 1;
  EXPECT_HAS(error(s), "zero_optimization.stage3_max_live_parameters");
  EXPECT_HAS(error(s), "what one op needs gathered at once");
}

// placement.policy: "device" or "auto"; auto needs a budget on the CPU and the simulated device
// (on a GPU it defaults to the free memory) and places the optimizer state itself (no offload
// keys with it).
TEST(ConfigChecks, PlacementPolicyAutoNeedsABudgetAndNoOffload) {
  EXPECT_NE(error_of([] {
              load_train_config("", {"placement.policy=gpu"});
            }).find("placement.policy must be \"device\" or \"auto\" (got \"gpu\")"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_train_config("", {"placement.policy=auto"}); })
                .find("placement.policy=\"auto\" needs placement.device_memory_limit > 0 on the "
                      "CPU and the simulated device"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              load_train_config("", {"placement.policy=auto", "device=sim"});
            }).find("needs placement.device_memory_limit > 0"),
            std::string::npos);
  for (const char* gpu : {"device=cuda", "device=cuda:1"})
    EXPECT_EQ(error_of([&] { load_train_config("", {"placement.policy=auto", gpu}); }), "");
  EXPECT_NE(error_of([] {
              load_train_config("", {"placement.policy=auto", "placement.device_memory_limit=1000",
                                     "zero_optimization.stage=1",
                                     "zero_optimization.offload_optimizer.device=cpu"});
            }).find("auto decides where the optimizer state and the parameters live itself"),
            std::string::npos);
  const TrainConfig c =
      load_train_config("", {"placement.policy=auto", "placement.device_memory_limit=1000"});
  EXPECT_EQ(c.placement_policy, "auto");
  EXPECT_EQ(load_train_config("", {}).placement_policy, "device");
}

// Each key is declared once: its table entry names the TrainConfig field it sets, so a plain key
// needs nothing else (docs/config.md, "Adding a key"). The keys without a field are the ones
// parse_checked reads itself, and DeepSpeed's keys that change nothing.
TEST(ConfigTable, EveryHonouredKeyHasAFieldOrIsReadByTheParser) {
  const std::set<std::string> read_by_parser = {
      "optimizer.type", "optimizer.params.adam_w_mode", "zero_optimization.cpu_offload",
      "zero_optimization.cpu_offload_params", "steps_per_print"};
  for (const ConfigKey& k : config_schema()) {
    if (k.use != KeyUse::HONOURED)
      EXPECT_FALSE(k.field) << k.path;
    else
      EXPECT_EQ(!k.field, read_by_parser.count(k.path) == 1) << k.path;
  }
}

TEST(ConfigTable, AFieldTakesItsKeysValue) {
  const TrainConfig c = load_train_config(
      "", {"eval.interval=7", "zero_optimization.offload_optimizer.dpu_warmup_steps=9",
           "fp16.hysteresis=3", "model.dropout=0.25", "activation_checkpointing.policy=selective",
           "scheduler.params.warmup_type=log", "optimizer.params.betas=[0.8,0.9]",
           "pipeline.schedule=zb_h1", "zero_optimization.stage=1",
           "zero_optimization.offload_optimizer.device=cpu", "seed=18446744073709551615"});
  EXPECT_EQ(c.eval_interval, 7);
  EXPECT_EQ(c.zero.offload_optimizer.dpu_warmup_steps, 9);
  EXPECT_EQ(c.fp16_loss_scale.hysteresis, 3);
  EXPECT_EQ(c.model.dropout, 0.25f);
  EXPECT_EQ(c.activation_policy, ActivationPolicy::SELECTIVE);
  EXPECT_EQ(c.lr_schedule.warmup_type, WarmupType::LOG);
  EXPECT_EQ(c.beta1, 0.8);
  EXPECT_EQ(c.beta2, 0.9);
  EXPECT_EQ(c.pipeline_schedule, "zb-h1");  // the parser's canonical name
  EXPECT_EQ(c.values["pipeline.schedule"], "zb-h1");
  EXPECT_EQ(c.zero.stage, 1);
  EXPECT_EQ(c.offload_optimizer, "cpu");
  EXPECT_TRUE(c.zero.offload_optimizer.enabled);
  EXPECT_EQ(c.seed, UINT64_MAX);
}

// The rules between keys are one check (config/check_settings.h), run when a config is read: by
// tide train before anything is written, and by tide estimate --config, with the same message.
TEST(CheckSettings, OneRuleForTrainAndEstimate) {
  const std::string rule =
      "zero_optimization.offload_optimizer.device=\"cpu\" with zero_optimization.stage=0: "
      "ZeRO-Offload offloads the partitioned optimizer state of stages 1-3";
  EXPECT_HAS(
      error_of([] { load_train_config("", {"zero_optimization.offload_optimizer.device=cpu"}); }),
      rule);
  const std::string dir = temp_dir("check_settings");
  {
    std::ofstream(dir + "/off.json") << R"({"zero_optimization": {"offload_optimizer":
                                            {"device": "cpu"}}, "model": {"vocab_size": 64}})";
  }
  EXPECT_HAS(error_of([&] { read_estimate_config(dir + "/off.json"); }), rule);
  TrainConfig c = load_train_config("", {});
  EXPECT_EQ(error_of([&] { check_settings(c); }), "");
  c.offload_optimizer = "cpu";
  EXPECT_HAS(error_of([&] { check_settings(c); }), rule);
}
