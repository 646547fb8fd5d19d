#!/usr/bin/env bash
# Fine-tuning a Llama-family model with tide, end to end (README, "Fine-tuning a Llama-family
# model"; issue #28): import a Hugging Face folder, prepare prompt/completion data with the
# model's own tokenizer, fine-tune with ZeRO-Offload, export, and load the result in
# transformers. Small enough for the CPU (a minute on 2 cores); `cli.finetune_llama` runs it.
#
#   bash examples/finetune_llama.sh [WORK_DIR]     (tide on PATH, or TIDE=build/tide)
#
# Needs python with torch and transformers (PYTHON, default python3; tools/requirements-test.txt)
# for step 0 and step 5. No model hub is reachable here, so step 0 makes the "downloaded" model:
# a small random LlamaForCausalLM (GQA, untied head, llama3 RoPE) saved by transformers, with a
# Llama-3-style tokenizer.json (tests/fixtures/tokenizer, built with HF tokenizers). With a real
# model, start at step 1 with its folder (and its model.* keys in step 3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tide=${TIDE:-tide}
python=${PYTHON:-python3}
work=${1:-runs/finetune_llama}
mkdir -p "$work" && cd "$work"
rm -rf base hf_base data run hf_tuned

# 0. The base model, as save_pretrained writes it, with its tokenizer.json.
"$python" - "$here/../tests/fixtures/tokenizer/llama3_style.json" <<'PY'
import shutil, sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=1207, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1203,
                  eos_token_id=1204,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
LlamaForCausalLM(cfg).save_pretrained("hf_base", safe_serialization=True)
shutil.copy(sys.argv[1], "hf_base/tokenizer.json")
PY

# 1. Import: the folder's weights as a tide checkpoint (q/k/v and gate/up fused).
"$tide" import --hf-dir hf_base --out base/model.ckpt

# 2. Fine-tuning records, encoded with the model's own tokenizer.json; the prompts are left
#    out of the loss (a loss mask in the shards).
for i in $(seq 1 40); do
  for pair in "red:apple" "yellow:banana" "green:lime" "purple:grape"; do
    printf '{"prompt": "Q: a %s fruit?\\nA:", "completion": " %s"}\n' "${pair%%:*}" "${pair##*:}"
  done
done > train.jsonl
"$tide" prepare --format jsonl --input train.jsonl --tokenizer hf_base/tokenizer.json \
  --out-dir data --val-fraction 0.1

# 3. Fine-tune from the imported weights with ZeRO-Offload (fp32 master weights and Adam on
#    the host). init_from takes the weights; the model.* keys restate the base model's shape.
"$tide" train init_from=base/model.ckpt data.dir=data out_dir=run \
  model.family=llama model.n_layer=2 model.n_head=4 model.n_kv_head=2 model.n_embd=64 \
  model.intermediate_size=128 model.max_seq_len=64 model.tie_word_embeddings=false \
  model.rms_norm_eps=1e-5 \
  model.rope_theta=500000 model.rope_scaling.type=llama3 model.rope_scaling.factor=8 \
  model.rope_scaling.original_max_position_embeddings=32 \
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
