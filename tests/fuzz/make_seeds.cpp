// Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/seed_*), valid inputs
// made by tide itself: make_seeds <corpus dir>. Regression inputs for fixed bugs sit beside
// them as crash_* files, written by hand.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tide/data/shard.h"
#include "tide/data/tokenizer.h"
#include "tide/train/checkpoint.h"
#include "tide/train/config.h"

namespace fs = std::filesystem;
using namespace tide;

namespace {

void put(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  fuzz::write_file((dir / name).string(), bytes);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <corpus dir>\n");
    return 2;
  }
  const fs::path root = argv[1];

  // Config files: the defaults as tide writes them, and a few hand-written ones.
  put(root / "config_json", "seed_defaults.json",
      config_to_json(load_train_config("", {})).dump(1));
  put(root / "config_json", "seed_small.json",
      R"({"train_micro_batch_size_per_gpu": 4, "seq_len": 64, "train_steps": 10,)"
      R"( "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.99]}},)"
      R"( "model": {"n_layer": 2, "n_head": 2, "n_embd": 64}, "data": {"dir": "data/x"}})");
  put(root / "config_json", "seed_preset.json",
      R"({"model": {"preset": "gpt2-124m"}, "activation_checkpointing": {"policy": "full"},)"
      R"( "scheduler": {"params": {"warmup_num_steps": 5, "total_num_steps": 100}}})");

  // Overrides: first line the config file (empty: none), then key=value lines.
  put(root / "config_overrides", "seed_overrides",
      "\noptimizer.params.lr=3e-4\noptimizer.params.betas=[0.9,0.95]\nmodel.n_layer=2\n"
      "data.dir=data/x\nbf16.enabled=false\nseq_len=64");
  put(root / "config_overrides", "seed_file_and_overrides",
      R"({"model": {"n_embd": 64}, "seq_len": 32})"
      "\nmodel.n_head=4\ntrain_steps=7\nactivation_checkpointing.policy=selective");

  // Token shards.
  const fs::path tmp = fs::temp_directory_path() / "tide_make_seeds";
  fs::create_directories(tmp);
  const std::vector<uint16_t> tokens = {0, 1, 2, 3, 50256, 65535, 7, 7, 7, 1};
  write_token_shard((tmp / "s.bin").string(), std::span<const uint16_t>(tokens));
  put(root / "shard", "seed_tokens.bin", slurp(tmp / "s.bin"));
  write_token_shard((tmp / "e.bin").string(), std::span<const uint16_t>());
  put(root / "shard", "seed_empty.bin", slurp(tmp / "e.bin"));

  // tokenizer.json, trained on a small text (its merges make the file small enough).
  const Tokenizer tok = Tokenizer::train(
      "the cat sat on the mat. the dog sat on the log. that is that, and this is this.\n", 300);
  tok.save((tmp / "tokenizer.json").string());
  put(root / "tokenizer", "seed_tokenizer.json", slurp(tmp / "tokenizer.json"));

  // Checkpoints of the tiny model: parameters only, and with the optimizer state.
  GPT model(fuzz::tiny_model(), ActivationPolicy::SAVE_ALL);
  model.init_weights(1);
  CheckpointInfo info;
  info.step = 3;
  info.tokenizer = "tokenizer.json";
  info.extra = {{"note", "seed"}};
  save_checkpoint((tmp / "p.ckpt").string(), model, info, false);
  put(root / "checkpoint", "seed_params.ckpt", slurp(tmp / "p.ckpt"));
  save_checkpoint((tmp / "o.ckpt").string(), model, info, true);
  put(root / "checkpoint", "seed_optimizer.ckpt", slurp(tmp / "o.ckpt"));
  fs::remove_all(tmp);
  return 0;
}
