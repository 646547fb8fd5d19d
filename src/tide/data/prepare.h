#pragma once
// prepare_corpus: text files -> tokenizer.json, train.bin, val.bin, meta.json.
//
// The library side of `tide prepare`; `tide train` with no arguments calls it on the default
// corpus (the fortunes of the Debian `fortunes` package) so that a bare `tide` trains something.
//
// Steps: read the input files and split them into documents (a whole file, or the pieces
// between separator lines such as fortune files' "%"); deal documents into train and val;
// train a BPE tokenizer on the train documents (or load GPT-2's); encode every document with
// <|endoftext|> in front of it (as llm.c's data scripts do), and write the shards and metadata.

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tide {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, directories (their regular files) or globs
  std::string out_dir;              // created if missing
  int vocab_size = 4096;            // for a trained tokenizer; ignored with GPT-2's or a file
  double val_fraction = 0.05;       // share of documents that go to val.bin
  std::string gpt2_encoder;         // encoder.json and vocab.bpe: use GPT-2's tokenizer
  std::string gpt2_vocab;
  std::string tokenizer_file;  // a tokenizer.json (HF tokenizers' or tide's) to use, not train
  double max_mb = 0;           // read at most this many MB of text (0: all)
  std::string doc_separator;   // a line that separates documents inside a file ("" : none)
  // "text"; "jsonl": fine-tuning records, {"text"} or {"prompt", "completion"} per line
  // (data/jsonl_records.h; prompts are left out of the loss); or "nanogpt": import nanoGPT's
  // headerless uint16 train.bin/val.bin (data/nanogpt_import.h; vocab_size 0 there = the largest
  // id + 1).
  std::string format = "text";
  // Special tokens (<|im_start|>, ...) written in the input: "text" encodes them as text,
  // "match" as their ids (HF's default; for chat-formatted fine-tuning data).
  std::string special_tokens = "text";
  std::function<void(const std::string&)> log;  // progress lines (default: stdout)
};

struct PrepareResult {
  std::string tokenizer_path, train_path, val_path, meta_path;
  int vocab_size = 0;
  int eot_id = 0;
  int64_t input_bytes = 0;
  int64_t train_documents = 0, val_documents = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  bool loss_mask = false;          // the shards carry a loss mask (prompt/completion records)
  int64_t train_loss_tokens = 0;   // train tokens the loss counts (all of them without a mask)
  double val_unigram_entropy = 0;  // nats: the loss of a model that only knows token frequencies
};

PrepareResult prepare_corpus(const PrepareOptions& options);

// Writes out_dir/meta.json (what prepared_corpus_exists looks for, so it is written last);
// returns its path. Shared by prepare_corpus and the nanoGPT import.
std::string write_prepared_meta(const std::string& out_dir, const nlohmann::json& meta);

// Whether out_dir holds a finished prepare (meta.json is written last), and its description read
// back from meta.json (paths, vocab and token counts; input_bytes and document counts too).
bool prepared_corpus_exists(const std::string& out_dir);
PrepareResult read_prepared_corpus(const std::string& out_dir);

// The default corpus: Debian's fortune files (plain-text files of /usr/share/games/fortunes,
// without *.dat indexes, *.u8 links or the off/ directory), fortunes separated by "%" lines.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
std::vector<std::string> default_corpus_files(const std::string& dir = kFortunesDir);
// Options that prepare the default corpus into out_dir.
PrepareOptions default_corpus_options(const std::string& out_dir);

// Documents of one file's text: the whole text, or the pieces between lines equal to
// `separator` (pieces that are empty or only whitespace are dropped).
std::vector<std::string> split_documents(const std::string& text, const std::string& separator);

// Entropy in nats of the unigram distribution of tokens: -sum p log p.
double unigram_entropy(const std::vector<int32_t>& tokens, int vocab_size);

}  // namespace tide
