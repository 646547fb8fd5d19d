#pragma once
// `tide export`: a checkpoint (one file, or a sharded directory) as a Hugging Face model
// folder, `model.safetensors` + `config.json`, that transformers loads as is: GPT2LMHeadModel
// for model.family=gpt2, LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM for the Llama
// family; and, when the checkpoint names its tokenizer (or one is given), the tokenizer files
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
// The Llama family (hf_export_llama.cpp; the inverse of hf_import_llama.cpp):
//   wte (V, C)                  -> model.embed_tokens.weight; output.weight -> lm_head.weight
//                                  (none when tied: HF's tied files leave it out)
//   h.i.self_attn.qkv_proj.weight (W, C), rows [q | k | v] -> model.layers.i.self_attn.q_proj,
//                                  k_proj, v_proj .weight (and .bias with Qwen2's qkv bias)
//   h.i.mlp.gate_up_proj.weight (2I, C), rows [gate | up] -> mlp.gate_proj, mlp.up_proj
//   the norms, o_proj, down_proj, ln_f -> their HF names (ln_f: model.norm.weight)
// Nothing is transposed (nn.Linear's (out, in) is tide's layout); a split tensor is a row range.
// Values are f32: the master weights when the compute dtype is not f32 and the checkpoint
// holds them, else the parameters (converted).

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

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
  // The Llama family's HF architecture: "llama", "qwen2" or "mistral"; "": qwen2 for a model
  // with a qkv bias, else llama.
  std::string architecture;
};

struct HfExportResult {
  GPTConfig config;
  int tensors = 0;
  uint64_t file_bytes = 0;    // of model.safetensors
  uint64_t buffer_bytes = 0;  // allocated for tensor data: the transpose buffer + 2 fixed
  std::string source;         // "parameters (f32)", "master weights (f32)", ...
  std::string tokenizer;      // the tokenizer.json exported, "" when none
  std::string architecture;   // config.json's: "GPT2LMHeadModel", "LlamaForCausalLM", ...
};

// The HF name of tide tensor `name` ("h.3.attn.c_attn.weight" ->
// "transformer.h.3.attn.c_attn.weight"); whether HF stores it transposed.
std::string hf_gpt2_name(const std::string& name);
bool hf_gpt2_transposed(const std::string& name);
// GPT2Config of a tide model. bos/eos: `eot_id` (the tokenizer's <|endoftext|>) when given,
// else GPT-2's 50256 for a 50257-token vocabulary, else null.
nlohmann::json hf_gpt2_config(const GPTConfig& config, std::optional<int> eot_id = std::nullopt,
                              DType dtype = DType::F32);

// One HF tensor of a Llama-family tide tensor: rows [row_begin, row_end) of it (the whole
// tensor, or q/k/v of the fused qkv_proj, gate/up of gate_up_proj).
struct HfOutTensor {
  std::string hf_name;
  int64_t row_begin = 0, row_end = 0;
};
// The HF tensors of tide tensor `name` of Llama-family model `config`, in row order.
std::vector<HfOutTensor> hf_llama_tensors(const GPTConfig& config, const std::string& name);
// The model_type to write: `requested` ("" picks, see HfExportOptions::architecture), checked
// against the model (Qwen2 has a qkv bias, Llama and Mistral none).
std::string hf_llama_model_type(const GPTConfig& config, const std::string& requested);
// LlamaConfig / Qwen2Config / MistralConfig of a tide model: every field import reads.
nlohmann::json hf_llama_config(const GPTConfig& config, const std::string& model_type,
                               std::optional<int> bos_id, std::optional<int> eos_id,
                               DType dtype = DType::F32);

// Exports `checkpoint` (a file or a sharded directory) to `out_dir`. The checkpoint is checked
// whole (every checksum, every tensor), and the tokenizer read, before anything is created in
// out_dir; an existing model.safetensors (or tokenizer file) is refused unless
// options.overwrite. Every file is written atomically; an overwrite without a tokenizer removes
// the tokenizer files an earlier export left (they would not be this model's).
HfExportResult export_hf(const std::string& checkpoint, const std::string& out_dir,
                         const HfExportOptions& options = {});

}  // namespace tide
