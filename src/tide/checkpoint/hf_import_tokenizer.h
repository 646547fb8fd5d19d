#pragma once
// The tokenizer side of `tide import` (hf_import.h), shared by the GPT-2 and Llama-family
// importers: the tokenizer.json copied next to the checkpoint, which the checkpoint then names
// (so `tide sample` and a run started from it with init_from find it).

#include <string>

#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/hf_import.h"

namespace tide {

struct HfImportTokenizer {
  std::string in;    // the tokenizer.json read ("": none)
  std::string text;  // its bytes, copied as they are
  std::string out;   // where it goes: tokenizer.json beside the checkpoint
};

// options.tokenizer, or the folder's own tokenizer.json when tide reads it and it fits a model of
// `vocab_size` tokens (else none, and result.tokenizer_skipped says why). Checks everything
// (readable, fits the model, an existing different out file only with options.overwrite)
// before anything is written.
HfImportTokenizer choose_import_tokenizer(const std::string& hf_dir, const std::string& out,
                                          const HfImportOptions& options, int vocab_size,
                                          HfImportResult& result);

// Writes the chosen tokenizer beside the checkpoint (atomically; nothing when it is that file
// already) and names it in `info` and `result`. Nothing without one.
void write_import_tokenizer(const HfImportTokenizer& tok, CheckpointInfo& info,
                            HfImportResult& result);

}  // namespace tide
