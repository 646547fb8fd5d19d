#pragma once
// `tide export`: a checkpoint (one file, or a sharded directory) as a Hugging Face GPT-2 model
// folder, `model.safetensors` + `config.json`, that transformers' GPT2LMHeadModel loads as is,
// and, when the checkpoint names its tokenizer (or one is given), the tokenizer files
// (hf_tokenizer_files.h) that make AutoTokenizer and pipeline("text-generation") work on it.
//
// Why streaming: consolidating a sharded checkpoint must not need the model in memory (the
// whole point of sharding is that no machine may hold it: DeepSpeed's zero_to_fp32 needed over
// 1 TB of RAM for an 80B model). The safetensors header is written first (every shape is known
// from the model config), then each tensor, assembled from its pieces through a fixed buffer.
// Only the four Conv1D weights of a layer need their whole tensor at once (HF stores them
// transposed), so peak memory is the largest of those (the MLP's 4C x C, in f32) plus two fixed
// buffers, whatever the model's size.
//
// Names and layouts (tide -> HF):
//   wte (V, C)                  -> transformer.wte.weight (V, C); the LM head is tied to it
//                                  (HF's tied GPT-2 files have no lm_head.weight)
//   wpe (T, C)                  -> transformer.wpe.weight
//   h.i.ln_1/ln_2/ln_f          -> transformer.h.i.ln_1.weight/bias ..., transformer.ln_f.*
//   h.i.attn.c_attn.weight (3C, C), attn.c_proj.weight (C, C), mlp.c_fc.weight (4C, C),
//   mlp.c_proj.weight (C, 4C)   -> transposed: HF's Conv1D weights are (in, out)
//   biases                      -> as they are
// Values are f32: the master weights when the compute dtype is not f32 and the checkpoint
// holds them, else the parameters (converted).

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tide/core/dtype.h"
#include "tide/model/config.h"

namespace tide {

struct HfExportOptions {
  bool overwrite = false;                 // replace an existing out_dir/model.safetensors
  size_t buffer_bytes = size_t{4} << 20;  // each of the two fixed buffers
  std::function<void(const std::string&)> progress;  // a line every ~10% (nullptr: silent)
  // The tokenizer.json to export ("": the one the checkpoint names, beside it, as `tide sample`
  // reads it; none when it names none).
  std::string tokenizer;
  // The dtype of model.safetensors: f32 (the default, the checkpoint's master weights or
  // parameters widened) or bf16 (those values rounded to nearest-even: half the file).
  DType dtype = DType::F32;
};

struct HfExportResult {
  GPTConfig config;
  int tensors = 0;
  uint64_t file_bytes = 0;    // of model.safetensors
  uint64_t buffer_bytes = 0;  // allocated for tensor data: the transpose buffer + 2 fixed
  std::string source;         // "parameters (f32)", "master weights (f32)", ...
  std::string tokenizer;      // the tokenizer.json exported, "" when none
};

// The HF name of tide tensor `name` ("h.3.attn.c_attn.weight" ->
// "transformer.h.3.attn.c_attn.weight"); whether HF stores it transposed.
std::string hf_gpt2_name(const std::string& name);
bool hf_gpt2_transposed(const std::string& name);
// GPT2Config of a tide model. bos/eos: `eot_id` (the tokenizer's <|endoftext|>) when given,
// else GPT-2's 50256 for a 50257-token vocabulary, else null.
nlohmann::json hf_gpt2_config(const GPTConfig& config, std::optional<int> eot_id = std::nullopt,
                              DType dtype = DType::F32);

// Exports `checkpoint` (a file or a sharded directory) to `out_dir`. The checkpoint is checked
// whole (every checksum, every tensor), and the tokenizer read, before anything is created in
// out_dir; an existing model.safetensors (or tokenizer file) is refused unless
// options.overwrite. Every file is written atomically; an overwrite without a tokenizer removes
// the tokenizer files an earlier export left (they would not be this model's).
HfExportResult export_hf_gpt2(const std::string& checkpoint, const std::string& out_dir,
                              const HfExportOptions& options = {});

}  // namespace tide
