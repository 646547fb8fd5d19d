#!/usr/bin/env bash
# Fine-tuning a Llama-family model with tide, end to end (README, "Fine-tuning a Llama-family
# model"; issue #28): import a Hugging Face folder, prepare prompt/completion data with the
# model's own tokenizer, fine-tune with ZeRO-Offload, export, and load the result in
# transformers. Small enough for the CPU (seconds); `cli.finetune_llama` runs it.
#
#   bash examples/finetune_llama.sh [WORK_DIR] [HF_FOLDER]    (tide on PATH, or TIDE=build/tide)
#
# HF_FOLDER is the base model as a model hub folder holds it (config.json, model.safetensors or
# a sharded index, tokenizer.json). No hub is reachable here, so the default is
# tests/fixtures/hf_llama_base: a small random LlamaForCausalLM (GQA, untied head, llama3 RoPE,
# bf16) saved by transformers, with a Llama-3-style tokenizer.json
# (tools/gen_hf_llama_base_fixture.py). Any other folder works as it is: init_from takes the
# model's family and shape from the checkpoint (no model.* keys to restate).
# Step 5 needs python with torch and transformers (PYTHON, default python3;
# tools/requirements-test.txt).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tide=${TIDE:-tide}
python=${PYTHON:-python3}
work=${1:-runs/finetune_llama}
hf_base=$(cd "${2:-$here/../tests/fixtures/hf_llama_base}" && pwd)
mkdir -p "$work" && cd "$work"
rm -rf base data run hf_tuned

# 1. Import: the folder's weights as a tide checkpoint (q/k/v and gate/up fused; bf16 widened
#    to f32), with its tokenizer.json beside it.
"$tide" import --hf-dir "$hf_base" --out base/model.ckpt

# 2. Fine-tuning records, encoded with the model's own tokenizer.json; the prompts are left
#    out of the loss (a loss mask in the shards).
for i in $(seq 1 40); do
  for pair in "red:apple" "yellow:banana" "green:lime" "purple:grape"; do
    printf '{"prompt": "Q: a %s fruit?\\nA:", "completion": " %s"}\n' "${pair%%:*}" "${pair##*:}"
  done
done > train.jsonl
"$tide" prepare --format jsonl --input train.jsonl --tokenizer "$hf_base/tokenizer.json" \
  --out-dir data --val-fraction 0.1

# 3. Fine-tune from the imported weights with ZeRO-Offload (fp32 master weights and Adam on
#    the host). init_from takes the weights and the model's family and shape (init_from=
#    "$hf_base", the folder itself, does too); seq_len is the fine-tuning's sequence length.
"$tide" train init_from=base/model.ckpt data.dir=data out_dir=run \
  zero_optimization.stage=2 zero_optimization.offload_optimizer.device=cpu \
  seq_len=32 train_micro_batch_size_per_gpu=8 train_steps=150 optimizer.params.lr=3e-3 \
  eval.interval=50 eval.sequences=4 log.interval=50 log.progress=false

# 4. Export: a LlamaForCausalLM folder with the tokenizer the data was prepared with.
"$tide" export --checkpoint run/model.ckpt --out-dir hf_tuned --quiet
"$tide" sample --checkpoint run/model.ckpt --prompt $'Q: a yellow fruit?\nA:' --tokens 8 \
  --top-k 1 > tide_answer.txt

# 5. transformers loads it, and answers as tide does.
"$python" - <<'PY'
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("hf_tuned")
model = AutoModelForCausalLM.from_pretrained("hf_tuned")
prompt = "Q: a yellow fruit?\nA:"
ids = tok(prompt, return_tensors="pt")
out = model.generate(**ids, max_new_tokens=8, do_sample=False)
answer = tok.decode(out[0][ids["input_ids"].shape[1]:], skip_special_tokens=True)
tide = open("tide_answer.txt", encoding="utf-8").read()[len(prompt):].rstrip("\n")
print(f"{type(model).__name__}: {prompt!r} -> {answer!r} (tide sample: {tide!r})")
assert answer == tide, f"transformers {answer!r} != tide sample {tide!r}"
assert answer.strip() == "banana", f"the fine-tuned model answers {answer!r}"
PY
