// One config file for `tide train` and `tide estimate`: estimate reads it with the trainer's
// parser (so it rejects what the trainer rejects, all unknown keys at once) and sizes the
// setup the typed config describes; the trainer refuses, naming key and value, every setting
// the schema takes that it cannot run yet.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>

#include "error_of.h"
#include "test_files.h"
#include "tide/config/estimate_setup.h"
#include "tide/config/unsupported_settings.h"
#include "tide/estimate/compare_options.h"
#include "tide/estimate/memory_estimate.h"
#include "tide/estimate/report.h"
#include "tide/train/trainer.h"

using namespace tide;
using json = nlohmann::json;
using tide::test::error_of;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

namespace {

TrainSetup setup_of(const char* text) {
  return setup_from_train_config(parse_train_config(json::parse(text), /*check_paths=*/false));
}

std::string estimate_error(const char* text) {
  return error_of([&] { setup_of(text); });
}

}  // namespace

TEST(EstimateSetup, EveryKeyEstimateSizesComesFromTheSchema) {
  const TrainSetup s = setup_of(R"({
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8,
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                          "offload_param": {"device": "cpu"}, "reduce_bucket_size": 123456789,
                          "stage3_max_live_parameters": 987654321},
    "bf16": {"enabled": true}, "model": {"preset": "gpt2-774m"}, "seq_len": 512,
    "tensor_parallel": {"size": 2, "sequence_parallel": true}, "world_size": 16,
    "activation_checkpointing": {"policy": "selective"}, "optimizer": {"type": "SGD"},
    "pipeline": {"stages": 2, "schedule": "zb-h1"}, "chunk_size_mb": 256 })");
  EXPECT_EQ(s.micro_batch, 4);
  EXPECT_EQ(s.grad_accum, 8);
  EXPECT_EQ(s.zero_stage, 3);
  EXPECT_EQ(s.zero.reduce_bucket_size, 123456789);
  EXPECT_EQ(s.zero.max_live_parameters, 987654321);
  EXPECT_EQ(s.offload, Offload::All);
  EXPECT_EQ(s.precision, Precision::BF16);
  EXPECT_EQ(s.optimizer, Optimizer::SGD);
  EXPECT_EQ(s.model.n_layer, 36);
  EXPECT_EQ(s.model.max_seq_len, 1024);
  EXPECT_EQ(s.seq(), 512);
  EXPECT_EQ(s.tp, 2);
  EXPECT_EQ(s.pp, 2);
  EXPECT_TRUE(s.sp);
  EXPECT_EQ(s.world_size, 16);
  EXPECT_EQ(s.recompute, Recompute::Selective);
  EXPECT_EQ(s.schedule, Schedule::ZBH1);
  EXPECT_EQ(s.chunk_mib, 256);
  EXPECT_EQ(estimate_memory(s).stages.size(), 2u);
  // Offload of the optimizer alone; interleaved with its virtual stages; fp16; fp32.
  const TrainSetup o = setup_of(R"({"zero_optimization": {"stage": 2,
    "offload_optimizer": {"device": "cpu"}}, "fp16": {"enabled": true},
    "pipeline": {"stages": 2, "schedule": "interleaved", "virtual_stages": 2},
    "gradient_accumulation_steps": 2,
    "world_size": 4})");
  EXPECT_EQ(o.offload, Offload::Optimizer);
  EXPECT_EQ(o.precision, Precision::FP16);
  EXPECT_EQ(o.schedule, Schedule::Interleaved);
  EXPECT_EQ(o.virtual_stages, 2);
  const TrainSetup d = setup_of("{}");
  EXPECT_EQ(d.precision, Precision::FP32);  // as in DeepSpeed and tide train
  EXPECT_EQ(d.world_size, 1);               // world_size 0: as launched; an estimate is for 1
  EXPECT_EQ(d.offload, Offload::None);
  EXPECT_EQ(d.optimizer, Optimizer::AdamW);
}

TEST(EstimateSetup, PlacementKeysAsTideTrainReadsThem) {
  const TrainSetup a = setup_of(R"({"model": {"vocab_size": 64},
    "placement": {"policy": "auto", "device_memory_limit": 3000000}})");
  EXPECT_EQ(a.placement, Placement::Auto);
  EXPECT_EQ(a.device_memory_limit, 3000000);
  EXPECT_EQ(estimate_memory(a).limit.limit, 3000000);
  EXPECT_TRUE(estimate_memory(a).limit.auto_placement);
  const TrainSetup d = setup_of(R"({"placement": {"device_memory_limit": 5}})");
  EXPECT_EQ(d.placement, Placement::Device);
  EXPECT_EQ(d.device_memory_limit, 5);
  EXPECT_EQ(setup_of("{}").device_memory_limit, 0);
}

TEST(EstimateSetup, ModelBatchAndChunkKeysAsTideTrainReadsThem) {
  // A tide train config (README's "training your own data"): positions default to seq_len.
  const TrainSetup s = setup_of(R"({
    "model": {"n_layer": 6, "n_head": 6, "n_embd": 384, "vocab_size": 8192},
    "seq_len": 256, "train_micro_batch_size_per_gpu": 8, "chunk_size_mb": 0.5 })");
  EXPECT_EQ(s.model.n_layer, 6);
  EXPECT_EQ(s.model.vocab_size, 8192);
  EXPECT_EQ(s.model.max_seq_len, 256);
  EXPECT_EQ(s.seq(), 256);
  EXPECT_EQ(s.micro_batch, 8);
  EXPECT_EQ(s.chunk_target_elems(), 131072);  // MiB of f32, as tide train
  EXPECT_EQ(setup_of(R"({"seq_len": 64, "model": {"max_seq_len": 0}})").model.max_seq_len, 64);
  // Without model keys: tide train's default model, not GPT-2 124M.
  const TrainSetup d = setup_of("{}");
  EXPECT_EQ(d.model.n_layer, 4);
  EXPECT_EQ(d.model.n_embd, 96);
  EXPECT_EQ(d.model.vocab_size, 0);  // the data's: `tide estimate` asks for --vocab
  // With a preset the positions are the preset's and seq_len only sets the training length,
  // which is what the activations scale with.
  const TrainSetup p = setup_of(R"({"model": {"preset": "gpt2-350m"}, "seq_len": 512})");
  EXPECT_EQ(p.model.max_seq_len, 1024);
  EXPECT_EQ(p.seq(), 512);
  TrainSetup full = p;
  full.seq_len = 0;
  EXPECT_LT(estimate_memory(p).device.activations, estimate_memory(full).device.activations);
}

// The gradients' dtype as tide train keeps them (DeepSpeed's data_types.grad_accum_dtype and its
// default): f32 for bf16 at stage 0, bf16 from stage 1; the key overrides both. The setup holds
// the key only (the default is the stage's, per row), and the estimate's grads are 4 or 2 bytes
// per parameter accordingly.
TEST(EstimateSetup, GradAccumDtypeAsTideTrainKeepsIt) {
  const TrainSetup s0 = setup_of(R"({"bf16": {"enabled": true}, "model": {"vocab_size": 64}})");
  EXPECT_FALSE(s0.grad_precision.has_value());
  EXPECT_EQ(grad_precision_of(s0, 0), Precision::FP32);
  EXPECT_EQ(grad_precision_of(s0, 1), Precision::BF16);
  const TrainSetup s1 = setup_of(R"({"bf16": {"enabled": true}, "model": {"vocab_size": 64},
    "zero_optimization": {"stage": 1}})");
  EXPECT_FALSE(s1.grad_precision.has_value());
  EXPECT_EQ(grad_precision_of(s1, 1), Precision::BF16);
  const TrainSetup k = setup_of(R"({"bf16": {"enabled": true}, "model": {"vocab_size": 64},
    "data_types": {"grad_accum_dtype": "bf16"}})");
  EXPECT_EQ(k.grad_precision, Precision::BF16);
  EXPECT_EQ(grad_precision_of(k, 0), Precision::BF16);
  EXPECT_EQ(setup_of(R"({"data_types": {"grad_accum_dtype": "fp32"}})").grad_precision,
            Precision::FP32);  // f32 training: the key is kept, and is the default anyway
  const int64_t f32_grads = estimate_memory(s0).device.grads;
  EXPECT_EQ(f32_grads, 2 * estimate_memory(k).device.grads);
  EXPECT_NE(estimate_error(R"({"data_types": {"grad_accum_dtype": "fp8"}})")
                .find("data_types.grad_accum_dtype must be \"fp32\", \"bf16\", \"fp16\""),
            std::string::npos);
}

// communication_data_type: DeepSpeed's three names or empty, else one error naming them (tide
// estimate and tide train parse it alike).
TEST(EstimateSetup, CommunicationDataTypeIsChecked) {
  EXPECT_EQ(estimate_error(R"({"communication_data_type": "fp32"})"), "");
  EXPECT_NE(estimate_error(R"({"communication_data_type": "int8"})")
                .find("communication_data_type must be \"fp32\", \"bf16\", \"fp16\" or empty "
                      "(DeepSpeed's default: the parameters' dtype) (got \"int8\")"),
            std::string::npos);
}

namespace tide {
// A failed comparison names the categories (gtest would print the struct's bytes).
void PrintTo(const MemoryBreakdown& b, std::ostream* os) {
  *os << breakdown_json(b).dump();
}
}  // namespace tide

namespace {

// `base` with the option's keys: its stage, offload devices and recompute policy.
json at_option(json base, const MemoryOption& o) {
  base["zero_optimization"]["stage"] = o.zero_stage;
  if (o.offload != Offload::None) base["zero_optimization"]["offload_optimizer"]["device"] = "cpu";
  if (o.offload == Offload::All) base["zero_optimization"]["offload_param"]["device"] = "cpu";
  base["activation_checkpointing"]["policy"] = to_string(o.recompute);
  return base;
}

}  // namespace

// Each row of `tide estimate --config` is the file as tide train would run it at the row's
// stage: DeepSpeed's dtype defaults depend on the stage (bf16 keeps f32 gradients and reduces
// through bf16 staging at stage 0 only), so every row's gradient and communication dtypes, and
// its bytes, are those of the same file parsed with the row's stage, whatever stage the file
// configures. Keys given explicitly hold in every row.
TEST(EstimateSetup, EveryRowTakesTheDtypeDefaultsOfItsStage) {
  const json base = json::parse(R"({"bf16": {"enabled": true}, "world_size": 4,
    "model": {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 256}, "seq_len": 32})");
  json keys = base;
  keys["data_types"]["grad_accum_dtype"] = "bf16";
  keys["communication_data_type"] = "fp32";
  for (const json& file : {base, keys}) {
    for (int configured : {0, 2}) {
      json j = file;
      j["zero_optimization"]["stage"] = configured;
      const TrainSetup setup = setup_from_train_config(parse_train_config(j, false));
      int64_t stage0_staging = -1;
      for (const OptionResult& row : compare_options(setup, {})) {
        SCOPED_TRACE(fmt::format("{} {}, configured stage {}, keys {}", row.option.name,
                                 to_string(row.option.recompute), configured,
                                 file.contains("data_types")));
        const TrainConfig at = parse_train_config(at_option(file, row.option), false);
        const TrainSetup mine = with_option(setup, row.option);  // what the row estimates
        const int stage = mine.zero_stage;
        EXPECT_EQ(stage, row.option.zero_stage);
        EXPECT_EQ(dtype_name(dtype_of(grad_precision_of(mine, stage))), dtype_name(grad_dtype(at)));
        EXPECT_EQ(dtype_name(dtype_of(comm_precision_of(mine, stage))), dtype_name(comm_dtype(at)));
        const MemoryEstimate e = estimate_memory(setup_from_train_config(at));
        EXPECT_EQ(row.estimate.device, e.device);
        EXPECT_EQ(row.estimate.host, e.host);
        if (stage == 0) stage0_staging = row.estimate.stages[0].comm_buffers.staging;
      }
      // The file's own dtypes at stage 0: f32 gradients reduced in bf16 (staging), or the keys'
      // bf16 gradients reduced in f32 (staging too); at stage 2 bf16 without staging.
      const bool given = file.contains("data_types");
      EXPECT_EQ(grad_precision_of(setup, 0), given ? Precision::BF16 : Precision::FP32);
      EXPECT_EQ(grad_precision_of(setup, 2), Precision::BF16);
      EXPECT_EQ(comm_precision_of(setup, 2), given ? Precision::FP32 : Precision::BF16);
      EXPECT_GT(stage0_staging, 0);
    }
  }
  // Flags alone (no config file, so no dtype keys): DeepSpeed's defaults too, as tide train
  // without the keys. The flags' bf16 DDP row reduces its f32 gradients through bf16 staging
  // just as the file's does (cli.shared_config holds the whole table from flags = from file).
  TrainSetup flags;
  flags.model = GPTConfig::preset("gpt2-124m");
  flags.world_size = 4;
  EXPECT_EQ(grad_precision_of(flags, 0), Precision::FP32);
  EXPECT_EQ(comm_precision_of(flags, 0), Precision::BF16);
  EXPECT_GT(estimate_memory(flags).stages[0].comm_buffers.staging, 0);
  flags.zero_stage = 1;
  EXPECT_EQ(estimate_memory(flags).stages[0].comm_buffers.staging, 0);  // bf16 sent as it is
}

TEST(EstimateSetup, ConfigErrorsAreTideTrainsErrors) {
  // A misspelt key, which estimate used to ignore, with the parser's suggestion.
  EXPECT_EQ(estimate_error(R"({"train_micro_batch_size_per_gpuu": 4})"),
            "unknown config key 'train_micro_batch_size_per_gpuu'; did you mean "
            "'train_micro_batch_size_per_gpu'? (`tide train --list-keys` lists all)");
  // A DeepSpeed-style config with five wrong keys: one error names all five.
  const std::string five = estimate_error(R"({
    "train_micro_batch_size_per_gpu": 2, "prescale_gradients": false,
    "optimizer": {"type": "AdamW", "params": {"lrr": 1e-3}},
    "zero_optimization": {"stage": 1, "elastic_checkpoint": true,
                          "offload_optimizer": {"devise": "cpu"}},
    "tensor_paralel": {"size": 2}})");
  EXPECT_HAS(five, "5 unknown config keys");
  for (const char* key :
       {"'prescale_gradients'", "'optimizer.params.lrr'", "'zero_optimization.elastic_checkpoint'",
        "'zero_optimization.offload_optimizer.devise' (did you mean "
        "'zero_optimization.offload_optimizer.device'?)",
        "'tensor_paralel' (did you mean 'tensor_parallel'?)"})
    EXPECT_HAS(five, key);
  EXPECT_HAS(estimate_error(R"({"tensor_parallel": {"size": "2"}})"),
             "config key 'tensor_parallel.size' must be an integer in [1, 65536] (got \"2\")");
  EXPECT_HAS(estimate_error(R"({"world_size": -1})"), "config key 'world_size' must be");
  EXPECT_HAS(estimate_error(R"({"zero_optimization": {"offload_optimizer": {"device": "nvme"}}})"),
             "must be \"cpu\" or \"none\" (got \"nvme\"); tide has no NVMe offload");
  EXPECT_HAS(estimate_error(R"({"zero_optimization": {"offload_param": {"device": "cpu"}}})"),
             "offloading the parameters needs the optimizer on the host too");
  EXPECT_HAS(estimate_error(R"({"activation_checkpointing": {"policy": "some"}})"),
             "use none, selective or full");
  EXPECT_HAS(estimate_error(R"({"pipeline": {"schedule": "zigzag"}})"),
             "unknown pipeline.schedule 'zigzag'");
  EXPECT_HAS(estimate_error(R"({"optimizer": {"type": "Lamb"}})"),
             "optimizer.type 'Lamb' is not supported");
  // A shape key beside a preset would be dropped: an error in both commands.
  EXPECT_EQ(estimate_error(R"({"model": {"preset": "gpt2-774m", "max_seq_len": 512}})"),
            "model.max_seq_len=512 conflicts with model.preset=gpt2-774m, whose "
            "model.max_seq_len is 1024; remove model.max_seq_len, or remove model.preset and "
            "give every shape key");
  EXPECT_EQ(setup_of(R"({"model": {"preset": "gpt2-774m", "n_layer": 36}})").model.n_layer, 36);

  const std::string dir = test::temp_dir("configs");
  std::ofstream(dir + "/truncated.json") << "{ \"parallel\": ";
  EXPECT_HAS(error_of([&] { read_estimate_config(dir + "/truncated.json"); }), "is not valid JSON");
  // Paths need not exist for an estimate (a cluster's config, sized on a laptop); tide train
  // checks them.
  std::ofstream(dir + "/cluster.json")
      << R"({"data": {"dir": "/nonexistent/tokens"}, "model": {"vocab_size": 512}})";
  EXPECT_EQ(read_estimate_config(dir + "/cluster.json").model.vocab_size, 512);
  EXPECT_HAS(error_of([&] { load_train_config(dir + "/cluster.json", {}); }),
             "data.dir '/nonexistent/tokens' does not exist");
}

TEST(EstimateSetup, EverySchedulesTideTrainRunsIsSized) {
  // zb-v: two chunks per stage (pipeline.virtual_stages defaults to 2), embedding and head on
  // stage 0.
  const TrainSetup v = setup_of(R"({"model": {"n_layer": 8, "vocab_size": 512}, "world_size": 4,
    "gradient_accumulation_steps": 8, "pipeline": {"stages": 4, "schedule": "zb-v"}})");
  EXPECT_EQ(v.schedule, Schedule::ZBV);
  EXPECT_EQ(v.virtual_stages, 2);
  const MemoryEstimate e = estimate_memory(v);
  EXPECT_GT(e.stages[0].params, e.stages[3].params);
  EXPECT_EQ(e.stages[0].inflight_microbatches, 4);  // p M_B at m = 2p
  // zb-auto with its memory limit; zb-1p and zb-2p by name.
  const TrainSetup a = setup_of(R"({"model": {"n_layer": 4, "vocab_size": 512}, "world_size": 4,
    "gradient_accumulation_steps": 8,
    "pipeline": {"stages": 4, "schedule": "zb-auto", "memory_limit": 2.5}})");
  EXPECT_EQ(a.schedule, Schedule::ZBAuto);
  EXPECT_EQ(a.memory_limit, 2.5);
  EXPECT_EQ(estimate_memory(a).stages[0].inflight_microbatches, 2);
  EXPECT_EQ(setup_of(R"({"pipeline": {"schedule": "zb-1p"}})").schedule, Schedule::ZB1P);
  EXPECT_EQ(setup_of(R"({"pipeline": {"schedule": "zb-2p"}})").schedule, Schedule::ZB2P);
}

TEST(EstimateSetup, PartitionActivationsAreSized) {
  // 4 layers, C = 64, T = 32, b = 4 at f32: a layer input is 32 KiB, 16 KiB per rank at t = 2.
  const std::string base =
      R"({"model": {"n_layer": 4, "n_embd": 64, "n_head": 4, "vocab_size": 256},
    "seq_len": 32, "train_micro_batch_size_per_gpu": 4, "world_size": 2,
    "tensor_parallel": {"size": 2}, "activation_checkpointing": {"policy": "full")";
  const TrainSetup plain = setup_of((base + "}}").c_str());
  const TrainSetup pa = setup_of((base + R"(, "partition_activations": true}})").c_str());
  const TrainSetup cpu =
      setup_of((base + R"(, "partition_activations": true, "cpu_checkpointing": true}})").c_str());
  EXPECT_FALSE(plain.partition_activations);
  EXPECT_TRUE(pa.partition_activations);
  EXPECT_TRUE(cpu.partition_activations && cpu.cpu_checkpointing);
  const MemoryEstimate e0 = estimate_memory(plain), e1 = estimate_memory(pa),
                       e2 = estimate_memory(cpu);
  const int64_t input = 32 * 4 * 64 * 4;  // s b h e
  // 4 whole inputs -> 4 halves + the whole residual buffer: 1 input less.
  EXPECT_EQ(e0.device.activations - e1.device.activations, input);
  // CPU checkpointing: the 4 halves move to the host.
  EXPECT_EQ(e1.device.activations - e2.device.activations, 4 * input / 2);
  EXPECT_EQ(e2.host_per_rank.activations, 4 * input / 2);
  EXPECT_EQ(e1.host_per_rank.activations, 0);
}

TEST(TrainerRefuses, EverySettingItCannotHonourByKeyAndValue) {
  auto refusal = [](const std::vector<std::string>& overrides, int world = 1) {
    return error_of([&] { check_trainer_can_honour(load_train_config("", overrides), world); });
  };
  EXPECT_EQ(refusal({}), "");
  EXPECT_EQ(refusal({"world_size=4"}, 4), "");
  EXPECT_EQ(refusal({"pipeline.schedule=gpipe"}), "");  // one stage: every schedule is the same
  EXPECT_EQ(refusal({"tensor_parallel.size=2"}, 4), "");
  EXPECT_HAS(refusal({"tensor_parallel.size=2"}, 3),
             "tensor_parallel.size=2: this run has 3 ranks, not a multiple of it (ranks = "
             "tensor_parallel.size x pipeline.stages x data-parallel replicas); launch `mpirun "
             "-np 4`");
  // pp x tp: the ranks a multiple of stages x tp; partitioned activations inside the stages.
  EXPECT_EQ(refusal({"tensor_parallel.size=2", "pipeline.stages=2", "model.n_layer=2"}, 4), "");
  EXPECT_EQ(refusal({"tensor_parallel.size=2", "pipeline.stages=2", "model.n_layer=2"}, 8), "");
  EXPECT_EQ(refusal({"tensor_parallel.size=2", "pipeline.stages=2", "model.n_layer=2"}, 6),
            "pipeline.stages=2 x tensor_parallel.size=2: this run has 6 ranks, not a multiple "
            "of 4 (each data-parallel replica holds stages x tp ranks); launch `mpirun -np 8` "
            "or change one of them");
  EXPECT_EQ(refusal({"tensor_parallel.size=2", "pipeline.stages=2", "model.n_layer=2",
                     "activation_checkpointing.policy=full",
                     "activation_checkpointing.partition_activations=true",
                     "activation_checkpointing.cpu_checkpointing=true"},
                    4),
            "");
  EXPECT_HAS(refusal({"pipeline.stages=4"}), "pipeline.stages=4: this run has 1 rank");
  EXPECT_HAS(refusal({"world_size=8"}, 2),
             "world_size=8: this run has 2 ranks (launch it with `mpirun -np 8`)");
  // ZeRO-Offload runs at stages 1-3 (parallel/offload_policy.h), under pp and tp too.
  EXPECT_EQ(refusal({"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_optimizer.pin_memory=true"}),
            "");
  EXPECT_EQ(refusal({"zero_optimization.offload_optimizer.device=cpu"}),
            "zero_optimization.offload_optimizer.device=\"cpu\" with zero_optimization.stage=0: "
            "ZeRO-Offload offloads the partitioned optimizer state of stages 1-3 (as DeepSpeed "
            "does); set zero_optimization.stage to 1, 2 or 3");
  EXPECT_EQ(refusal({"zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=cpu",
                     "pipeline.stages=2", "model.n_layer=2"},
                    2),
            "");
  // Under tensor parallelism (tp x dp, no pipeline) too, offload_param included.
  EXPECT_EQ(refusal({"zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=cpu",
                     "tensor_parallel.size=2"},
                    2),
            "");
  EXPECT_EQ(refusal({"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu", "tensor_parallel.size=2",
                     "tensor_parallel.sequence_parallel=true"},
                    4),
            "");
  EXPECT_EQ(refusal({"zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=cpu",
                     "tensor_parallel.size=2", "pipeline.stages=2", "model.n_layer=2"},
                    4),
            "");
  EXPECT_HAS(error_of([] {
               load_train_config("", {"zero_optimization.offload_optimizer.delayed_update=true"});
             }),
             "zero_optimization.offload_optimizer.delayed_update=true needs "
             "zero_optimization.offload_optimizer.device=\"cpu\"");
  EXPECT_EQ(refusal({"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu"},
                    2),
            "");
  EXPECT_EQ(refusal({"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu"}),
            "");
  EXPECT_HAS(refusal({"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu",
                      "zero_optimization.offload_param.device=cpu"},
                     2),
             "zero_optimization.offload_param.device=\"cpu\" with zero_optimization.stage=2: "
             "parameter offload needs ZeRO stage 3 (as in DeepSpeed)");
  EXPECT_EQ(refusal({"placement.policy=auto", "placement.device_memory_limit=1000000",
                     "pipeline.stages=2", "model.n_layer=2"},
                    2),
            "");
  EXPECT_EQ(refusal({"placement.policy=auto", "placement.device_memory_limit=1000000",
                     "tensor_parallel.size=2"},
                    2),
            "");
  EXPECT_EQ(refusal({"placement.policy=auto", "placement.device_memory_limit=1000000",
                     "zero_optimization.stage=3"},
                    2),
            "");
  EXPECT_HAS(refusal({"optimizer.type=SGD"}),
             "optimizer.type=\"SGD\": tide train has only Adam and AdamW");
  EXPECT_HAS(refusal({"pipeline.stages=2", "pipeline.schedule=interleaved",
                      "pipeline.virtual_stages=2", "gradient_accumulation_steps=2"}),
             "pipeline.stages=2");
  // The Trainer itself refuses, before it prepares or writes anything.
  EXPECT_HAS(error_of([] { Trainer t(load_train_config("", {"tensor_parallel.size=2"})); }),
             "tensor_parallel.size=2: this run has 1 rank, not a multiple of it");
}
