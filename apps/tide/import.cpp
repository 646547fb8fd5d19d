// `tide import --hf-dir hf/ --out runs/hf/model.ckpt`: a Hugging Face GPT-2 folder
// (model.safetensors + config.json) as a tide checkpoint, for `tide train` (init_from=<it>) and
// `tide sample`. The inverse of `tide export` (see checkpoint/hf_import.h for what is refused).

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "tide/checkpoint/hf_import.h"

namespace tide::app {

namespace {

struct ImportArgs {
  std::string hf_dir;
  std::string out;
  std::string tokenizer;
  bool overwrite = false;
};

void run_import(const ImportArgs& a) {
  HfImportOptions o;
  o.overwrite = a.overwrite;
  o.tokenizer = a.tokenizer;
  const HfImportResult r = import_hf_gpt2(a.hf_dir, a.out, o);
  fmt::print("imported {} from {} ({} tensors, {}) to {}\n", r.config.str(), a.hf_dir, r.tensors,
             r.source_dtype, a.out);
  if (!r.ignored.empty()) fmt::print("not imported: {}\n", fmt::join(r.ignored, ", "));
  if (!r.tokenizer_skipped.empty())
    fmt::print("the folder's tokenizer.json is not used: {}\n", r.tokenizer_skipped);
  // init_from takes the model.* keys from the checkpoint (init_from.h).
  const std::string train = fmt::format("init_from={}", a.out);
  if (r.tokenizer.empty())
    fmt::print(
        "no tokenizer: `tide sample` needs one (import again with --tokenizer <tokenizer.json>); "
        "`tide train` can start from it with {}\n",
        train);
  else
    fmt::print("tokenizer: {}; sample with `tide sample --checkpoint {}`, train with {}\n",
               r.tokenizer, a.out, train);
}

}  // namespace

void add_import_command(CLI::App& app) {
  auto a = std::make_shared<ImportArgs>();
  auto* cmd = app.add_subcommand(
      "import",
      "Read a Hugging Face GPT-2, Llama, Qwen2 or Mistral folder (config.json + safetensors) "
      "into a tide checkpoint");
  cmd->add_option("--hf-dir", a->hf_dir,
                  "folder written by save_pretrained of GPT2LMHeadModel, LlamaForCausalLM, "
                  "Qwen2ForCausalLM or MistralForCausalLM (config.json, model.safetensors or "
                  "model.safetensors.index.json and its shards)")
      ->required();
  cmd->add_option("--out", a->out, "checkpoint file to write (e.g. runs/hf/model.ckpt)")
      ->required();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "a tokenizer.json to copy next to the checkpoint (`tide sample` needs one); "
                  "default: the folder's own tokenizer.json when tide reads it (the one `tide "
                  "export` writes, or GPT-2's)");
  cmd->add_flag("--overwrite", a->overwrite, "replace an existing checkpoint at --out");
  cmd->callback([a] { run_import(*a); });
}

}  // namespace tide::app
