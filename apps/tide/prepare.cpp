// `tide prepare`: text files -> tokenizer.json, train.bin, val.bin, meta.json (see docs/data.md).
#include <fmt/format.h>

#include <chrono>

#include "commands.h"
#include "tide/data/prepare.h"

namespace tide::app {

void add_prepare_command(CLI::App& app) {
  auto opts = std::make_shared<PrepareOptions>();
  auto* cmd = app.add_subcommand(
      "prepare",
      "Tokenize text into token shards: writes tokenizer.json, train.bin, val.bin, meta.json. "
      "Without --input, prepares the default corpus (the Debian fortunes).");
  cmd->add_option("--input", opts->inputs,
                  "Text files, directories or globs (quote globs); default: the fortunes corpus");
  cmd->add_option("--out-dir", opts->out_dir, "Output directory, e.g. data/mytext")->required();
  cmd->add_option("--vocab-size", opts->vocab_size,
                  "Vocabulary of the trained BPE tokenizer: 256 bytes + merges + <|endoftext|>")
      ->capture_default_str();
  cmd->add_option("--val-fraction", opts->val_fraction, "Share of documents that go to val.bin")
      ->capture_default_str();
  cmd->add_option("--gpt2-encoder", opts->gpt2_encoder,
                  "GPT-2's encoder.json: use GPT-2's tokenizer instead of training one");
  cmd->add_option("--gpt2-vocab", opts->gpt2_vocab, "GPT-2's vocab.bpe (with --gpt2-encoder)");
  cmd->add_option("--tokenizer", opts->tokenizer_file,
                  "A tokenizer.json to use instead of training one: HF tokenizers' byte-level BPE "
                  "(GPT-2's, Llama 3's or Qwen2's pipeline) or one written by an earlier `tide "
                  "prepare`");
  cmd->add_option("--max-mb", opts->max_mb, "Read at most this many MB of text (0: all)")
      ->capture_default_str();
  cmd->add_option("--format", opts->format,
                  "text (tokenize text files), jsonl (fine-tuning records, one JSON object a "
                  "line: {\"text\": ...} or {\"prompt\": ..., \"completion\": ...}, the prompt "
                  "left out of the loss), or nanogpt (import nanoGPT's headerless uint16 "
                  "train.bin/val.bin from the directory given as --input)")
      ->capture_default_str();
  cmd->add_option("--special-tokens", opts->special_tokens,
                  "Special tokens written in the input (<|im_start|>, ...): text (encoded as "
                  "text), or match (their ids, as HF does by default; for chat-formatted data)")
      ->capture_default_str();
  cmd->add_option("--doc-separator", opts->doc_separator,
                  "A line that separates documents inside a file (e.g. % for fortune files); "
                  "default: each file is one document");
  cmd->callback([opts, cmd] {
    PrepareOptions o = *opts;
    // nanoGPT's ids: the vocabulary is the data's unless --vocab-size is given.
    if (o.format == "nanogpt" && cmd->count("--vocab-size") == 0) o.vocab_size = 0;
    if (o.inputs.empty() && o.format == "text") {
      const PrepareOptions fortunes = default_corpus_options(o.out_dir);
      o.inputs = fortunes.inputs;
      if (o.doc_separator.empty()) o.doc_separator = fortunes.doc_separator;
      fmt::print("prepare: no --input, using the default corpus ({} fortune files)\n",
                 o.inputs.size());
    }
    const auto start = std::chrono::steady_clock::now();
    const PrepareResult r = prepare_corpus(o);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print(
        "prepare: done in {:.1f} s: vocab {}, train {} tokens ({} documents), val {} tokens ({} "
        "documents)\n",
        seconds, r.vocab_size, r.train_tokens, r.train_documents, r.val_tokens, r.val_documents);
  });
}

}  // namespace tide::app
