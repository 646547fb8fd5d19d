#include "tide/data/nanogpt_import.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tide/core/error.h"
#include "tide/data/shard.h"
#include "tide/data/tokenizer.h"

namespace fs = std::filesystem;

namespace tide {

namespace {

constexpr int32_t kShardMagic = 20240520;  // llm.c's (and tide's) shard header

// A nanoGPT .bin: the whole file as uint16 ids (little-endian, as numpy writes on x86/ARM).
std::vector<uint16_t> read_nanogpt_bin(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  TIDE_CHECK(!ec, "{}: cannot read it ({})", path, ec.message());
  TIDE_CHECK(size % 2 == 0,
             "{}: {} bytes is an odd size: nanoGPT's .bin files hold uint16 ids (2 bytes each); "
             "the copy is incomplete, or it is not nanoGPT data",
             path, size);
  TIDE_CHECK(size > 0, "{}: empty; nanoGPT's prepare.py writes at least one token", path);
  std::vector<uint16_t> ids(size / 2);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(size));
  TIDE_CHECK(in.gcount() == static_cast<std::streamsize>(size), "{}: short read", path);
  int32_t head = 0;
  std::memcpy(&head, ids.data(), std::min<size_t>(4, size));
  TIDE_CHECK(!(size >= 1024 && head == kShardMagic),
             "{}: already a token shard with llm.c's header, not headerless nanoGPT data; use it "
             "as it is (data.train={})",
             path, path);
  return ids;
}

}  // namespace

PrepareResult import_nanogpt(const PrepareOptions& options) {
  const auto log = options.log ? options.log : [](const std::string& line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  TIDE_CHECK(options.inputs.size() == 1 && fs::is_directory(options.inputs[0]),
             "--format nanogpt takes one --input: nanoGPT's data directory (with train.bin and "
             "val.bin, e.g. nanoGPT/data/shakespeare)");
  TIDE_CHECK(!options.out_dir.empty(), "no output directory; pass --out-dir, e.g. data/mytext");
  const fs::path in(options.inputs[0]);
  TIDE_CHECK(fs::is_regular_file(in / "train.bin"),
             "{}: no train.bin; nanoGPT's prepare.py writes train.bin and val.bin there",
             in.string());
  const bool gpt2 = !options.gpt2_encoder.empty() || !options.gpt2_vocab.empty();
  TIDE_CHECK(!gpt2 || (!options.gpt2_encoder.empty() && !options.gpt2_vocab.empty()),
             "GPT-2's tokenizer needs both files: pass --gpt2-encoder encoder.json and "
             "--gpt2-vocab vocab.bpe");

  const std::vector<uint16_t> train = read_nanogpt_bin((in / "train.bin").string());
  std::vector<uint16_t> val;
  if (fs::exists(in / "val.bin")) val = read_nanogpt_bin((in / "val.bin").string());
  int max_id = *std::max_element(train.begin(), train.end());
  if (!val.empty()) max_id = std::max<int>(max_id, *std::max_element(val.begin(), val.end()));

  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  TIDE_CHECK(!ec, "--out-dir {}: cannot create it ({}); choose a writable directory",
             options.out_dir, ec.message());
  PrepareResult r;
  r.tokenizer_path = (fs::path(options.out_dir) / "tokenizer.json").string();
  int vocab = options.vocab_size > 0 ? options.vocab_size : max_id + 1;
  r.eot_id = vocab - 1;  // unknown without a tokenizer (meta.json says so)
  if (gpt2) {
    const Tokenizer tok = Tokenizer::load_gpt2(options.gpt2_encoder, options.gpt2_vocab);
    tok.save(r.tokenizer_path);
    vocab = options.vocab_size > 0 ? options.vocab_size : tok.vocab_size();
    r.eot_id = tok.eot_id();
  }
  TIDE_CHECK(max_id < vocab,
             "{}: token id {} is >= the vocabulary {}; raise --vocab-size (or leave it out: the "
             "largest id + 1)",
             in.string(), max_id, vocab);
  TIDE_CHECK(vocab <= 65536,
             "--vocab-size {} is above 65536 (nanoGPT's .bin files hold uint16 ids)", vocab);

  r.train_path = (fs::path(options.out_dir) / "train.bin").string();
  r.val_path = (fs::path(options.out_dir) / "val.bin").string();
  write_token_shard(r.train_path, std::span<const uint16_t>(train));
  if (!val.empty()) write_token_shard(r.val_path, std::span<const uint16_t>(val));
  // What this import does not write must not be left from an earlier `tide prepare` into the
  // same directory: the trainer reads out_dir's val.bin and tokenizer.json when they are there,
  // and would validate on the old data and copy the old tokenizer next to its checkpoints
  // (`tide sample` and `tide export` would then decode with it).
  if (val.empty()) fs::remove(r.val_path, ec);
  if (!gpt2) fs::remove(r.tokenizer_path, ec);
  r.vocab_size = vocab;
  r.input_bytes = static_cast<int64_t>(2 * (train.size() + val.size()));
  r.train_tokens = static_cast<int64_t>(train.size());
  r.val_tokens = static_cast<int64_t>(val.size());
  if (!val.empty()) {
    std::vector<int32_t> v(val.begin(), val.end());
    r.val_unigram_entropy = unigram_entropy(v, vocab);
  }
  const nlohmann::json meta = {
      {"vocab_size", r.vocab_size},
      {"eot_id", r.eot_id},
      {"eot_id_known", gpt2},
      {"tokenizer", gpt2 ? "gpt2" : "none"},
      {"tokenizer_file", "tokenizer.json"},
      {"train_file", "train.bin"},
      {"val_file", "val.bin"},
      {"train_tokens", r.train_tokens},
      {"val_tokens", r.val_tokens},
      {"train_documents", 0},
      {"val_documents", 0},
      {"input_bytes", r.input_bytes},
      {"sources", {(in / "train.bin").string(), (in / "val.bin").string()}},
      {"format", "nanogpt"},
      {"val_unigram_entropy", r.val_unigram_entropy},
      {"uniform_loss", std::log(static_cast<double>(r.vocab_size))},
  };
  r.meta_path = write_prepared_meta(options.out_dir, meta);
  log(
      fmt::format("prepare: imported nanoGPT data from {}: {} train tokens, {} val tokens, vocab "
                  "{}{}; wrote {}",
                  in.string(), r.train_tokens, r.val_tokens, r.vocab_size,
                  gpt2 ? " (GPT-2 tokenizer)" : " (no tokenizer: `tide sample` cannot decode)",
                  options.out_dir));
  return r;
}

}  // namespace tide
