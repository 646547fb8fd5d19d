#pragma once
// `tide prepare --format nanogpt`: imports nanoGPT's data (data/<name>/train.bin, val.bin from
// its prepare.py: headerless uint16 token ids, np.memmap's format) into tide's token shards,
// which carry llm.c's 1 KiB header. Only the header is added; the ids are kept as they are.
//
// The tokenizer is not in nanoGPT's .bin files: give GPT-2's files (--gpt2-encoder,
// --gpt2-vocab) for data made with tiktoken's "gpt2" (openwebtext, shakespeare) to write
// tokenizer.json, so that `tide sample` can decode; without them the shards train but cannot be
// sampled as text (nanoGPT's char-level meta.pkl is a Python pickle tide does not read).

#include "tide/data/prepare.h"

namespace tide {

// options.inputs: one directory holding train.bin (and val.bin, optional). options.vocab_size:
// 0 = the largest id + 1, else every id must be below it. Writes train.bin, val.bin (if any),
// meta.json and, with GPT-2's files, tokenizer.json into options.out_dir.
PrepareResult import_nanogpt(const PrepareOptions& options);

}  // namespace tide
