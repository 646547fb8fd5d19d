// bench_export_fixture: a randomly initialised GPT saved as a sharded checkpoint (N ranks'
// shards written from one store), plus tide's logits on fixed tokens: the input of the
// `tide export` peak-memory measurement (bench/RESULTS.md) and of tools/check_hf_export.py,
// which compares Hugging Face's logits on the exported model with these.
//
// Usage: bench_export_fixture --out DIR [--model gpt2-124m | --n-layer L --n-head H --n-embd C
//          --vocab V --seq T] [--world 4] [--seed 1] [--tokens 64] [--no-optimizer-state]
// Writes DIR/ckpt/ (the sharded checkpoint), DIR/logits.json ({"tokens": [...], "shape":
// [T, V]}) and DIR/logits.f32 (T x V little-endian f32, tide's logits for those tokens).
// Prints one JSON line: parameters, checkpoint bytes, seconds, the program's peak RSS.
//
// With --checkpoint FILE (a trained checkpoint of either family, e.g. a Llama-family run for
// tests/cli/export_llama.sh) no model is made: only the logits files of that checkpoint.

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench_cli.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/core/rng.h"
#include "tide/model/gpt.h"

using namespace tide;

int main(int argc, char** argv) try {
  CLI::App app{"bench_export_fixture: a random GPT as a sharded checkpoint, and its logits"};
  std::string out, preset;
  GPTConfig c;
  int world = 4, tokens = 64;
  uint64_t seed = 1;
  bool no_opt = false;
  std::string checkpoint;
  app.add_option("--out", out, "output folder")->required();
  app.add_option("--checkpoint", checkpoint,
                 "write only the logits of this checkpoint file (no random model)");
  app.add_option("--model", preset, "a GPT-2 preset (gpt2-124m, ...)");
  app.add_option("--n-layer", c.n_layer);
  app.add_option("--n-head", c.n_head);
  app.add_option("--n-embd", c.n_embd);
  app.add_option("--vocab", c.vocab_size);
  app.add_option("--seq", c.max_seq_len);
  app.add_option("--world", world, "ranks the checkpoint is sharded over");
  app.add_option("--seed", seed);
  app.add_option("--tokens", tokens, "tokens of the logits fixture (<= seq)");
  app.add_flag("--no-optimizer-state", no_opt, "save the parameters only");
  bench::parse_args(app, argc, argv);
  if (!preset.empty()) c = GPTConfig::preset(preset);
  c.dropout = 0;
  // tide's logits on fixed tokens: (tokens, V) f32 into DIR/logits.f32, the tokens into
  // DIR/logits.json.
  auto write_logits = [&](GPT& model, const GPTConfig& cfg) {
    TIDE_CHECK(tokens >= 1 && tokens <= cfg.max_seq_len, "--tokens must be in [1, {}]",
               cfg.max_seq_len);
    auto mb = model.make_micro_batch(1, tokens);
    mb->training = false;
    mb->keep_logits = true;
    const PhiloxStream rng{seed, 0x70c5};
    nlohmann::json ids = nlohmann::json::array();
    for (int t = 0; t < tokens; ++t) {
      mb->tokens.i32()[t] = static_cast<int32_t>(rng.uint(t) % cfg.vocab_size);
      mb->targets.i32()[t] = -1;
      ids.push_back(mb->tokens.i32()[t]);
    }
    model.forward(*mb);
    std::filesystem::create_directories(out);
    std::ofstream(std::filesystem::path(out) / "logits.f32", std::ios::binary)
        .write(static_cast<const char*>(mb->logits.data),
               static_cast<std::streamsize>(int64_t{tokens} * cfg.vocab_size * 4));
    std::ofstream(std::filesystem::path(out) / "logits.json")
        << nlohmann::json{{"tokens", ids}, {"shape", {tokens, cfg.vocab_size}}}.dump() << "\n";
  };
  if (!checkpoint.empty()) {
    const CheckpointInfo info = read_checkpoint_info(checkpoint);
    GPT model(info.config, ActivationPolicy::SAVE_ALL, 0, /*with_optimizer=*/false);
    load_checkpoint(checkpoint, model);
    write_logits(model, info.config);
    std::printf("%s\n", nlohmann::json{{"bench", "export_fixture"},
                                       {"checkpoint", checkpoint},
                                       {"model", info.config.str()},
                                       {"tokens", tokens}}
                            .dump()
                            .c_str());
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();

  ModelOptions o;
  o.group_size = world;
  o.store.with_optimizer = !no_opt;
  GPT model(c, ActivationPolicy::SAVE_ALL, o);
  model.init_weights(seed);
  ChunkStore& store = model.store();
  if (!no_opt)  // Adam's moments get values of their own: an export must not pick them up
    for (ChunkKind k : {ChunkKind::ADAM_M, ChunkKind::ADAM_V}) {
      const PhiloxStream rng{seed, 100 + static_cast<uint64_t>(k)};
      uint64_t i = 0;
      for (int id = 0; id < store.layout().num_tensors(); ++id) {
        const Tensor t = store.tensor(k, id);
        for (int64_t e = 0; e < t.numel(); ++e) t.f32()[e] = rng.normal(i++) * 1e-3f;
      }
    }

  const std::string dir = (std::filesystem::path(out) / "ckpt").string();
  CheckpointInfo info;
  info.config = c;
  info.extra = {{"fixture", "bench_export_fixture"}, {"seed", seed}};
  for (int r = 0; r < world; ++r) save_checkpoint_shard(dir, store, info, !no_opt, r, world);
  commit_sharded_checkpoint(dir, world);
  const double save_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  write_logits(model, c);

  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const ShardedCheckpointInfo x = read_sharded_checkpoint_info(dir, /*verify_data=*/false);
  std::printf("%s\n", nlohmann::json{{"bench", "export_fixture"},
                                     {"model", c.str()},
                                     {"params", c.num_parameters()},
                                     {"world", world},
                                     {"checkpoint_tensor_bytes", x.total_bytes},
                                     {"save_s", save_s},
                                     {"peak_rss_mib", ru.ru_maxrss / 1024.0}}
                          .dump()
                          .c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_export_fixture: error: %s\n", e.what());
  return 1;
}
