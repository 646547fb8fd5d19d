// DeepSpeed configs read as DeepSpeed reads them (docs/config.md, "Coming from DeepSpeed"):
// integral number forms (2e8) for integer keys, the optimizer type spellings and adam_w_mode,
// DeepSpeed's batch derivation, the keys that cannot change a tide run (accepted, named in one
// warning line, recorded in config.json only when given), the fp16 loss-scale keys, the
// deprecated cpu_offload spellings, the refused max_grad_norm and the "did you mean" rule.
#include <gtest/gtest.h>

#include "error_of.h"
#include "tide/config/config.h"

using namespace tide;
using tide::test::error_of;
using json = nlohmann::json;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TrainConfig parse(const char* text, int ranks = 0) {
  return parse_train_config(json::parse(text), /*check_paths=*/true, ranks);
}

}  // namespace

TEST(DeepSpeedConfig, IntegerKeysTakeIntegralNumberForms) {
  const TrainConfig c = parse(R"({"zero_optimization": {"allgather_bucket_size": 2e8,
      "reduce_bucket_size": 50000000.0, "stage3_prefetch_bucket_size": 1e7}, "seed": 1e3})");
  EXPECT_EQ(c.zero.allgather_bucket_size, 200000000);
  EXPECT_EQ(c.zero.reduce_bucket_size, 50000000);
  EXPECT_EQ(c.zero.prefetch_bucket_size, 10000000);
  EXPECT_EQ(c.seed, 1000u);
  // Recorded as integers: config.json and the ranks' agreement see one spelling per value.
  EXPECT_TRUE(c.values["zero_optimization.allgather_bucket_size"].is_number_integer());
  EXPECT_EQ(config_to_json(c)["zero_optimization"]["allgather_bucket_size"].dump(), "200000000");
  const std::string half = error_of([] { parse(R"({"zero_optimization": {"stage": 2.5}})"); });
  EXPECT_TRUE(contains(half, "'zero_optimization.stage' must be an integer in [0, 3] (got 2.5)"))
      << half;
  EXPECT_TRUE(contains(error_of([] { parse(R"({"train_steps": 1e19})"); }), "must be an integer"));
  EXPECT_TRUE(contains(error_of([] { parse(R"({"seed": -1e3})"); }), "non-negative integer"));
}

TEST(DeepSpeedConfig, AdamIsAdamWUnlessAdamWModeIsFalse) {
  for (const char* type : {"Adam", "adam", "ADAM"}) {
    const TrainConfig c = parse_train_config({{"optimizer", {{"type", type}}}});
    EXPECT_TRUE(c.adam_w_mode) << type;
    EXPECT_EQ(c.optimizer_type, "AdamW");
    EXPECT_EQ(c.values["optimizer.type"], "Adam");
  }
  const TrainConfig l2 =
      parse(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})");
  EXPECT_FALSE(l2.adam_w_mode);
  EXPECT_TRUE(parse_train_config(config_to_json(l2)) == l2);
  // DeepSpeed's AdamW is AdamW whatever adam_w_mode says (its effective_adam_w_mode).
  const TrainConfig w =
      parse(R"({"optimizer": {"type": "adamw", "params": {"adam_w_mode": false}}})");
  EXPECT_TRUE(w.adam_w_mode);
  EXPECT_EQ(w.values["optimizer.type"], "AdamW");
  const std::string lamb = error_of([] { parse(R"({"optimizer": {"type": "Lamb"}})"); });
  EXPECT_TRUE(contains(lamb, "optimizer.type 'Lamb' is not supported; tide has Adam and AdamW"))
      << lamb;
}

TEST(DeepSpeedConfig, BatchDerivedAsDeepSpeedDerivesIt) {
  struct Case {
    const char* config;
    int ranks, micro, accum;
  };
  const Case cases[] = {
      {R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 2, 4, 4},
      {R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 2, 8, 2},
      {R"({"train_batch_size": 32})", 4, 8, 1},
      {R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", 2, 4, 2},
      {R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
           "gradient_accumulation_steps": 2})",
       2, 4, 2},
      // The data-parallel ranks: ranks / (tensor_parallel x pipeline stages).
      {R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
           "tensor_parallel": {"size": 2}})",
       4, 4, 4},
      // Ranks not known here: the world_size key, else 1 (tide estimate's world).
      {R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "world_size": 2})", 0, 4,
       4},
      {R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 0, 4, 8},
  };
  for (const Case& k : cases) {
    const TrainConfig c = parse(k.config, k.ranks);
    EXPECT_EQ(c.micro_batch, k.micro) << k.config;
    EXPECT_EQ(c.grad_accum, k.accum) << k.config;
    // config.json holds the derived values; read back (at any ranks) it is the same config.
    EXPECT_TRUE(parse_train_config(config_to_json(c)) == c) << k.config;
    EXPECT_TRUE(parse_train_config(config_to_json(c), true, k.ranks) == c) << k.config;
  }
  const std::string odd = error_of(
      [] { parse(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})", 2); });
  EXPECT_TRUE(contains(odd,
                       "train_batch_size=30 is not a multiple of train_micro_batch_size_per_gpu 4 "
                       "x 2 data-parallel ranks = 8, so gradient_accumulation_steps cannot be "
                       "derived"))
      << odd;
  const std::string small = error_of([] { parse(R"({"train_batch_size": 2})", 4); });
  EXPECT_TRUE(contains(small, "train_batch_size=2 is not a multiple of 4 data-parallel ranks"))
      << small;
  const std::string all = error_of([] {
    parse(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
              "gradient_accumulation_steps": 2})",
          2);
  });
  EXPECT_TRUE(contains(all,
                       "train_batch_size 32 != train_micro_batch_size_per_gpu 4 x "
                       "gradient_accumulation_steps 2 x data-parallel ranks 2"))
      << all;
}

TEST(DeepSpeedConfig, IgnoredKeysAreAcceptedNamedOnceAndRecordedWhenGiven) {
  const TrainConfig c = parse(R"({"wall_clock_breakdown": true,
      "zero_optimization": {"allgather_partitions": true, "reduce_scatter": false},
      "activation_checkpointing": {"number_checkpoints": null, "profile": false}})");
  const std::vector<std::string> want = {
      "zero_optimization.allgather_partitions", "zero_optimization.reduce_scatter",
      "activation_checkpointing.number_checkpoints", "activation_checkpointing.profile",
      "wall_clock_breakdown"};  // schema order
  EXPECT_EQ(c.ignored_keys, want);
  EXPECT_EQ(ignored_keys_warning(c),
            "tide: warning: ignoring 5 DeepSpeed config keys that cannot change a tide run: "
            "zero_optimization.allgather_partitions, zero_optimization.reduce_scatter, "
            "activation_checkpointing.number_checkpoints, activation_checkpointing.profile, "
            "wall_clock_breakdown (docs/config.md, \"Coming from DeepSpeed\")");
  const json j = config_to_json(c);
  EXPECT_TRUE(j["activation_checkpointing"].contains("profile"));
  EXPECT_FALSE(j["activation_checkpointing"].contains("synchronize_checkpoint_boundary"));
  EXPECT_FALSE(j.contains("dump_state"));
  EXPECT_TRUE(parse_train_config(j) == c);
  EXPECT_EQ(ignored_keys_warning(parse("{}")), "");
  // Still typed: an ignored key with a value of the wrong type is an error.
  EXPECT_TRUE(contains(error_of([] { parse(R"({"wall_clock_breakdown": "yes"})"); }),
                       "'wall_clock_breakdown' must be true or false"));
}

TEST(DeepSpeedConfig, MaxGradNormIsRefusedAsDeepSpeedRefusesIt) {
  const std::string e =
      error_of([] { parse(R"({"optimizer": {"params": {"max_grad_norm": 1.0}}})"); });
  EXPECT_TRUE(contains(e, "'optimizer.params.max_grad_norm' is refused") &&
              contains(e, "gradient_clipping"))
      << e;
}

TEST(DeepSpeedConfig, Fp16LossScaleKeysWithDeepSpeedsDefaults) {
  const TrainConfig d = parse("{}");
  EXPECT_EQ(d.fp16_loss_scale.loss_scale, 0.0);
  EXPECT_EQ(d.fp16_loss_scale.initial_scale_power, 16);
  EXPECT_EQ(d.fp16_loss_scale.loss_scale_window, 1000);
  EXPECT_EQ(d.fp16_loss_scale.hysteresis, 2);
  EXPECT_EQ(d.fp16_loss_scale.min_loss_scale, 1.0);
  const TrainConfig c = parse(R"({"fp16": {"enabled": false, "loss_scale": 128,
      "initial_scale_power": 12, "loss_scale_window": 500, "hysteresis": 4,
      "consecutive_hysteresis": true, "min_loss_scale": 0.5, "auto_cast": true}})");
  EXPECT_EQ(c.fp16_loss_scale.loss_scale, 128.0);
  EXPECT_EQ(c.fp16_loss_scale.initial_scale_power, 12);
  EXPECT_EQ(c.fp16_loss_scale.loss_scale_window, 500);
  EXPECT_EQ(c.fp16_loss_scale.hysteresis, 4);
  EXPECT_TRUE(c.fp16_loss_scale.consecutive_hysteresis);
  EXPECT_EQ(c.fp16_loss_scale.min_loss_scale, 0.5);
  EXPECT_TRUE(c.fp16_loss_scale.auto_cast);
  EXPECT_TRUE(c.ignored_keys.empty());  // real keys, not ignored ones
  EXPECT_TRUE(contains(error_of([] { parse(R"({"fp16": {"initial_scale_power": 200}})"); }),
                       "'fp16.initial_scale_power' must be an integer in [0, 127]"));
  EXPECT_TRUE(contains(error_of([] { parse(R"({"fp16": {"min_loss_scale": 0}})"); }),
                       "'fp16.min_loss_scale' must be a number > 0"));
}

TEST(DeepSpeedConfig, DeprecatedCpuOffloadSpellings) {
  const TrainConfig c = parse(R"({"zero_optimization": {"stage": 2, "cpu_offload": true}})");
  EXPECT_EQ(c.offload_optimizer, "cpu");
  EXPECT_TRUE(c.zero.offload_optimizer.enabled);
  EXPECT_TRUE(parse_train_config(config_to_json(c)) == c);  // recorded in the new key alone
  const TrainConfig p = parse(R"({"zero_optimization": {"stage": 3, "cpu_offload": true,
      "cpu_offload_params": true}})");
  EXPECT_EQ(p.offload_param, "cpu");
  EXPECT_EQ(parse(R"({"zero_optimization": {"cpu_offload": false}})").offload_optimizer, "none");
  const std::string both = error_of([] {
    parse(
        R"({"zero_optimization": {"cpu_offload": true, "offload_optimizer": {"device": "cpu"}}})");
  });
  EXPECT_TRUE(contains(both,
                       "zero_optimization.cpu_offload (deprecated in DeepSpeed) and "
                       "zero_optimization.offload_optimizer.device are the same setting"))
      << both;
}

TEST(DeepSpeedConfig, DidYouMeanPicksANearMissNeverAnotherWord) {
  auto error = [](const char* text) { return error_of([&] { parse(text); }); };
  EXPECT_TRUE(contains(error(R"({"activation_checkpointing": {"profle": true}})"),
                       "did you mean 'activation_checkpointing.profile'?"));
  EXPECT_TRUE(contains(error(R"({"activation_checkpointing": {"polciy": "full"}})"),
                       "did you mean 'activation_checkpointing.policy'?"));
  EXPECT_TRUE(contains(error(R"({"trian_steps": 3})"), "did you mean 'train_steps'?"));
  // Another word is not a typo: no suggestion rather than a wrong one.
  for (const char* text : {R"({"activation_checkpointing": {"prefetch": true}})",
                           R"({"flops_profiler": {"enabled": true}})", R"({"steps": 3})"}) {
    const std::string e = error(text);
    EXPECT_TRUE(contains(e, "unknown config key") && !contains(e, "did you mean")) << e;
  }
}
