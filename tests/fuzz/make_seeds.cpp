// Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/seed_*), valid inputs
// made by tide itself (and, for hf_import, cut from the committed Hugging Face fixture):
// make_seeds <corpus dir>. Regression inputs for fixed bugs sit beside them as crash_* files.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_sharded.h"
#include "fuzz_util.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/hf_export.h"
#include "tide/config/config.h"
#include "tide/core/dtype.h"
#include "tide/data/shard.h"
#include "tide/data/tokenizer.h"
#include "tide/model/layout.h"

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

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// A Hugging Face GPT-2 folder of the tiny model as one hf_import input (fuzz_hf_import.cpp):
// the fixture's config.json (written by transformers) with the tiny model's shape, and a
// model.safetensors laid out as HF writes one ({"format": "pt"}, names in order), each tensor
// the leading block of the fixture's tensor of that name, in `dtype` (F32, BF16 or F16).
// `prefix`: "transformer." or "" (HF writes both); `extras`: an attn.bias mask buffer and an
// lm_head.weight equal to wte, with tie_word_embeddings false.
std::string hf_folder(const fs::path& fixture, const std::string& dtype, const std::string& prefix,
                      bool extras) {
  const GPTConfig c = fuzz::tiny_model();
  ojson cfg = ojson::parse(slurp(fixture / "config.json"));
  cfg["n_layer"] = c.n_layer;
  cfg["n_head"] = c.n_head;
  cfg["n_embd"] = c.n_embd;
  cfg["vocab_size"] = c.vocab_size;
  cfg["n_positions"] = c.max_seq_len;
  if (extras) cfg["tie_word_embeddings"] = false;

  // The fixture's tensors: name -> (shape, f32 values).
  const std::string src = slurp(fixture / "model.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(src[i]);
  const json head = json::parse(src.substr(8, n));
  auto values = [&](const std::string& name, int64_t rows, int64_t cols) {
    const json& e = head.at(name);
    const int64_t src_cols = e["shape"].size() == 2 ? e["shape"][1].get<int64_t>() : 1;
    const char* base = src.data() + 8 + n + e["data_offsets"][0].get<uint64_t>();
    std::vector<float> v;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        float f;
        std::memcpy(&f, base + (r * src_cols + k) * 4, 4);
        v.push_back(f);
      }
    return v;
  };

  struct T {
    std::string name;
    json shape;
    std::vector<float> v;
  };
  std::vector<T> tensors;
  const ChunkLayout layout = make_layout(c);
  for (const TensorSlot& s : layout.slots()) {
    const std::string hf = hf_gpt2_name(s.name);  // "transformer.<name>"
    const int64_t rows = hf_gpt2_transposed(s.name) ? s.shape[1] : s.shape[0];
    const int64_t cols =
        s.shape.ndim == 2 ? (hf_gpt2_transposed(s.name) ? s.shape[0] : s.shape[1]) : 1;
    json shape = s.shape.ndim == 2 ? json{rows, cols} : json{rows};
    tensors.push_back({prefix + hf.substr(12), shape, values(hf, rows, cols)});
  }
  if (extras) {
    tensors.push_back({prefix + "h.0.attn.bias",
                       {1, 1, c.max_seq_len, c.max_seq_len},
                       std::vector<float>(c.max_seq_len * c.max_seq_len, 1.0f)});
    const auto wte = std::find_if(tensors.begin(), tensors.end(),
                                  [&](const T& t) { return t.name == prefix + "wte.weight"; });
    T head = *wte;
    head.name = "lm_head.weight";
    tensors.push_back(std::move(head));
  }
  std::sort(tensors.begin(), tensors.end(), [](const T& a, const T& b) { return a.name < b.name; });

  ojson header = {{"__metadata__", {{"format", "pt"}}}};
  std::string bytes;
  for (const T& t : tensors) {
    const bool mask = t.name.ends_with("attn.bias");  // HF keeps buffers in f32
    const std::string dt = mask ? "F32" : dtype;
    const size_t begin = bytes.size();
    for (float f : t.v) {
      if (dt == "F32") {
        bytes.append(reinterpret_cast<const char*>(&f), 4);
      } else {
        const uint16_t h = dt == "BF16" ? f32_to_bf16(f) : f32_to_f16(f);
        bytes.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    header[t.name] = {{"dtype", dt}, {"shape", t.shape}, {"data_offsets", {begin, bytes.size()}}};
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return fuzz::join_prefixed(cfg.dump(2), file + h + bytes);
}

// nanoGPT's data folder as one nanogpt_bin input (fuzz_nanogpt_bin.cpp).
std::string nanogpt_input(uint8_t flags, const std::vector<uint16_t>& train,
                          const std::vector<uint16_t>& val) {
  auto raw = [](const std::vector<uint16_t>& ids) {
    return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 2);
  };
  return std::string(1, static_cast<char>(flags)) + fuzz::join_prefixed(raw(train), raw(val));
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

  // The index.json commit_sharded_checkpoint writes for the shards the sharded_index target
  // writes (fuzz_sharded.h), without its indentation (12.6 KB with it, 64 tensors).
  fuzz::save_tiny_sharded_checkpoint((tmp / "sharded").string());
  put(root / "sharded_index", "seed_index.json",
      json::parse(slurp(tmp / "sharded" / "index.json")).dump());

  // Hugging Face GPT-2 folders, cut from the committed fixture (tests/fixtures/hf_gpt2_tiny;
  // whole, its 69 KB model.safetensors is above the fuzzers' 16 KB input limit).
  const fs::path fixture = fs::path(TIDE_SOURCE_DIR) / "tests/fixtures/hf_gpt2_tiny";
  put(root / "hf_import", "seed_f32", hf_folder(fixture, "F32", "transformer.", false));
  put(root / "hf_import", "seed_bf16_tied_head_mask",
      hf_folder(fixture, "BF16", "transformer.", true));
  put(root / "hf_import", "seed_f16_no_prefix", hf_folder(fixture, "F16", "", false));

  // nanoGPT's train.bin (and val.bin): GPT-2 ids, a small vocabulary, --vocab-size 65536.
  put(root / "nanogpt_bin", "seed_train_val",
      nanogpt_input(1, {50256, 464, 3290, 318, 257, 50256, 40, 0, 65535, 11},
                    {50256, 464, 3797, 13}));
  put(root / "nanogpt_bin", "seed_train_only", nanogpt_input(0, {1, 2, 3, 0, 2, 1, 1, 3}, {}));
  put(root / "nanogpt_bin", "seed_vocab_65536", nanogpt_input(3, {7, 7, 65535, 1}, {2, 9}));
  fs::remove_all(tmp);
  return 0;
}
