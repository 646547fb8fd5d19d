#pragma once
// `tide import`: a Hugging Face GPT-2 folder (model.safetensors + config.json, as
// GPT2LMHeadModel.save_pretrained writes it) as a tide checkpoint that `tide train` starts
// from (init_from) and `tide sample` reads. The inverse of hf_export.h.
//
// Why a refusal list: tide runs one architecture (pre-LN GPT-2, tanh GELU, LayerNorm eps 1e-5,
// 4C MLP, tied head, scaled attention). A config field that would make HF compute something
// else (another activation, eps, n_inner, an untied head, cross-attention, ...) is refused with
// its name and value instead of importing weights that silently compute a different function.
//
// Names (HF -> tide): "transformer." is optional (HF writes both forms); wte.weight -> wte,
// wpe.weight -> wpe, the rest keep their names; the Conv1D weights (in, out) are transposed to
// tide's (out, in). attn.bias / attn.masked_bias (causal-mask buffers of older files) are
// ignored; lm_head.weight is accepted only when it equals wte bit for bit (tide's head is tied).
// F32 is copied exactly; BF16 and F16 are widened to f32 (exactly). Everything is read and
// checked before the output is written; the checkpoint holds no optimizer state.

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tide/core/dtype.h"
#include "tide/model/config.h"

namespace tide {

struct HfImportOptions {
  bool overwrite = false;  // replace an existing output checkpoint (and tokenizer.json)
  // A tokenizer.json to copy next to the checkpoint; "": the folder's own tokenizer.json when
  // there is one that tide reads and that fits the model (else none).
  std::string tokenizer;
};

struct HfImportResult {
  GPTConfig config;
  int tensors = 0;                   // tide tensors written
  std::string source_dtype;          // "F32", or e.g. "BF16 (widened to f32)"
  std::vector<std::string> ignored;  // HF tensors not imported (mask buffers, tied lm_head)
  std::string tokenizer;             // the tokenizer written next to the checkpoint, or ""
  std::string tokenizer_skipped;     // why the folder's tokenizer.json was not used ("": none)
};

// The tide model of a GPT2Config; throws a tide::Error naming the first field tide cannot
// represent. `where` names the file in messages.
GPTConfig gpt_config_from_hf(const nlohmann::json& hf, const std::string& where);

// The Llama family (model_type llama, qwen2 or mistral; hf_import_llama.cpp): the tide model
// (model.family=llama) of the config; throws a tide::Error naming the first field tide cannot
// represent (another activation or rope type, head_dim, attention_bias / mlp_bias). Mistral's
// sliding_window caps max_seq_len (attention is the same inside the window).
GPTConfig llama_config_from_hf(const nlohmann::json& hf, const std::string& where);
// A LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM folder (config.json `hf` already
// read; model.safetensors, or model.safetensors.index.json and its shards) into checkpoint
// `out`: q/k/v fused into qkv_proj, gate/up into gate_up_proj, lm_head.weight into
// output.weight (or checked equal to the embedding when tied). The tokenizer as for GPT-2:
// --tokenizer, or the folder's own tokenizer.json when tide reads it and it fits the model.
HfImportResult import_hf_llama(const std::string& hf_dir, const nlohmann::json& hf,
                               const std::string& out, const HfImportOptions& options);

// The model of the Hugging Face folder `hf_dir` from its config.json alone (GPT-2, or the
// Llama family by model_type), as `tide import` reads it: what `tide train init_from=<folder>`
// takes its model.* keys from. Throws a tide::Error when the folder has no config.json or
// tide cannot represent the model.
GPTConfig hf_folder_model(const std::string& hf_dir);

// HfImportResult::source_dtype for tensors read in `dtypes` (count per dtype): "F32",
// "BF16 (widened to f32)", "BF16+F32 (widened to f32)". Shared by both importers.
std::string source_dtype_summary(const std::map<DType, int>& dtypes);

// Imports `hf_dir` into the single-file checkpoint `out` (a Llama-family config goes to
// import_hf_llama). Throws a tide::Error (one line) and
// creates nothing when anything is missing, unsupported or damaged.
HfImportResult import_hf_gpt2(const std::string& hf_dir, const std::string& out,
                              const HfImportOptions& options = {});

}  // namespace tide
