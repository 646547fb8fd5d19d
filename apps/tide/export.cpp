// `tide export --checkpoint runs/default/model.ckpt --out-dir hf/`: a checkpoint (one file or a
// sharded directory) as a Hugging Face folder (model.safetensors + config.json) that
// transformers' GPT2LMHeadModel, or for the Llama family LlamaForCausalLM / Qwen2ForCausalLM /
// MistralForCausalLM, .from_pretrained loads. Streams tensor by tensor: the memory it
// needs is bounded by the largest transposed tensor, not the model (see checkpoint/hf_export.h).

#include <fmt/core.h>

#include <cstdio>

#include "commands.h"
#include "tide/checkpoint/hf_export.h"

namespace tide::app {

namespace {

struct ExportArgs {
  std::string checkpoint;
  std::string out_dir;
  std::string tokenizer;
  std::string dtype = "f32";
  std::string architecture;
  bool overwrite = false;
  bool quiet = false;
};

void run_export(const ExportArgs& a) {
  HfExportOptions o;
  o.overwrite = a.overwrite;
  o.tokenizer = a.tokenizer;
  o.architecture = a.architecture;
  TIDE_CHECK(a.dtype == "f32" || a.dtype == "bf16",
             "export --dtype '{}': model.safetensors is written in f32 or bf16; pass --dtype f32 "
             "or --dtype bf16",
             a.dtype);
  o.dtype = a.dtype == "bf16" ? DType::BF16 : DType::F32;
  if (!a.quiet)
    o.progress = [](const std::string& line) {
      fmt::print("{}\n", line);
      std::fflush(stdout);
    };
  const HfExportResult r = export_hf(a.checkpoint, a.out_dir, o);
  fmt::print(
      "exported {} to {}/model.safetensors ({} tensors in {} from the checkpoint's {}, {:.1f} "
      "MiB) and config.json ({}); tensor buffers {:.1f} MiB\n{}",
      r.config.str(), a.out_dir, r.tensors, a.dtype, r.source, r.file_bytes / 1048576.0,
      r.architecture, r.buffer_bytes / 1048576.0,
      r.tokenizer.empty()
          ? "no tokenizer: the checkpoint names none (trained on raw token shards); pass "
            "--tokenizer <tokenizer.json> for AutoTokenizer and pipeline() to work\n"
          : fmt::format("tokenizer {} -> tokenizer.json, tokenizer_config.json, "
                        "special_tokens_map.json, generation_config.json\n",
                        r.tokenizer));
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand(
      "export",
      "Write a checkpoint as a Hugging Face folder: GPT-2, or Llama, Qwen2 or Mistral for "
      "model.family=llama (model.safetensors, config.json and the tokenizer files "
      "transformers' AutoTokenizer and pipeline() read)");
  cmd->add_option("--checkpoint", a->checkpoint,
                  "checkpoint file or sharded checkpoint directory written by `tide train`")
      ->required();
  cmd->add_option("--out-dir", a->out_dir, "folder to write model.safetensors and config.json to")
      ->required();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "tokenizer.json to export (default: the one the checkpoint names, beside it)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--dtype", a->dtype,
                  "f32 (default: the master weights, or the parameters widened) or bf16 (those "
                  "rounded to nearest-even: half the file; config.json says torch_dtype bfloat16)");
  cmd->add_option("--architecture", a->architecture,
                  "a model.family=llama checkpoint as llama (LlamaForCausalLM), qwen2 "
                  "(Qwen2ForCausalLM: a model with model.qkv_bias) or mistral "
                  "(MistralForCausalLM); default: qwen2 with a qkv bias, else llama");
  cmd->add_flag("--overwrite", a->overwrite,
                "replace an existing export (model.safetensors and the tokenizer files) in "
                "--out-dir");
  cmd->add_flag("--quiet", a->quiet, "no progress lines");
  cmd->callback([a] { run_export(*a); });
}

}  // namespace tide::app
