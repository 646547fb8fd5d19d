#!/usr/bin/env bash
# `tide export` of trained Llama-family models (issue #28): the folders load in transformers as
# LlamaForCausalLM (GQA, untied head, llama3 RoPE scaling), Qwen2ForCausalLM (qkv bias, tied
# head) and MistralForCausalLM (--architecture mistral), and their float32 logits on fixed
# tokens equal tide's to 1e-4 (tools/check_hf_export_llama.py; tide's logits come from
# bench_export_fixture --checkpoint), and transformers' greedy pipeline("text-generation") on
# the exported folders continues a prompt as `tide sample --top-k 1` (the KV-cache decoder)
# does; `tide import` of an exported folder takes its tokenizer.json and samples the same. Needs
# torch and transformers in "${TIDE_PYTHON:-python3}"
# (tools/requirements-test.txt); skips (77) without them.
set -uo pipefail
tide=$1 fixture=$2 src=$3 dir=$4
python=${TIDE_PYTHON:-python3}
# find_spec: whether they are installed, without importing them (importing takes ~5 s).
if ! "$python" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('transformers') and u.find_spec('torch')))" 2> /dev/null; then
  echo "SKIPPED: $python has no transformers/torch (pip install -r tools/requirements-test.txt)"
  exit 77
fi
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
# One thread each for tide and torch: the models are tiny, and beside other tests (ctest -j2)
# more threads only contend.
export OMP_NUM_THREADS=1
fail=0
source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"
# Documents that repeat three random letters: continuing one means copying the letter three
# positions back, which needs RoPE's relative positions (a decoder that turns q and k by the
# wrong position continues it wrongly, where a fixed text would still come out right).
letters=(a b c d e f g h i j k l m n o p)
RANDOM=7
for i in $(seq 1 400); do
  tri="${letters[RANDOM % 16]} ${letters[RANDOM % 16]} ${letters[RANDOM % 16]}"
  echo "$tri $tri $tri $tri $tri $tri"
  echo "%"
done > corpus.txt
# The Llama run's data with a Llama-3-style tokenizer.json (tests/fixtures/tokenizer: its own
# regex, <|begin_of_text|> before each document), exported as is for PreTrainedTokenizerFast;
# the Qwen2 run's with a BPE trained here (GPT-2 style, exported as GPT2Tokenizer's files).
"$tide" prepare --input corpus.txt --doc-separator % --out-dir data_l3 \
  --tokenizer "$src/tests/fixtures/tokenizer/llama3_style.json" > prepare.log 2>&1 \
  || { cat prepare.log; exit 1; }
"$tide" prepare --input corpus.txt --doc-separator % --out-dir data --vocab-size 300 \
  > prepare.log 2>&1 || { cat prepare.log; exit 1; }
# Trained (600 steps, about a second): norms and biases move away from their initial values, so
# a tensor written under another one's name shows in the logits.
common=(model.family=llama model.n_layer=2 model.n_head=4 model.n_embd=32
  model.intermediate_size=48 seq_len=32 train_micro_batch_size_per_gpu=8 train_steps=600
  optimizer.params.lr=1e-2 eval.interval=0 eval.sequences=2 log.progress=false log.interval=600
  threads=1)
train() {  # train NAME KEY=VALUE...
  local name=$1
  shift
  "$tide" train "${common[@]}" "$@" out_dir="$name" > "$name.log" 2>&1 || { cat "$name.log"; exit 1; }
}
train llama data.dir=data_l3 model.n_kv_head=2 model.tie_word_embeddings=false model.rope_theta=500000 \
  model.rope_scaling.type=llama3 model.rope_scaling.factor=8 \
  model.rope_scaling.original_max_position_embeddings=16
train qwen2 data.dir=data model.n_kv_head=1 model.qkv_bias=true model.tie_word_embeddings=true \
  model.rms_norm_eps=1e-6 model.rope_theta=1000000
cases=()
for run in llama qwen2 mistral; do
  ckpt=$([ $run = mistral ] && echo llama || echo $run)/model.ckpt
  arch=$([ $run = mistral ] && echo "--architecture mistral" || echo "")
  "$tide" export --checkpoint "$ckpt" --out-dir "hf_$run" $arch > "export_$run.log" 2>&1 \
    || { cat "export_$run.log"; exit 1; }
  "$fixture" --checkpoint "$ckpt" --out "logits_$run" --tokens 24 > /dev/null || exit 1
done
grep -h "config.json (" export_*.log
grep -q '"tokenizer_class": "PreTrainedTokenizerFast"' hf_llama/tokenizer_config.json \
  && cmp -s hf_llama/tokenizer.json "$src/tests/fixtures/tokenizer/llama3_style.json" \
  || { echo "FAILED: hf_llama's tokenizer files are not the Llama-3-style file's"; fail=1; }
printf 'k m f k m f k' > prompt.txt
for run in llama qwen2; do
  "$tide" sample --checkpoint $run/model.ckpt --prompt "$(cat prompt.txt)" --tokens 24 --top-k 1 \
    > sample_$run.txt 2> sample.err || { cat sample.err; exit 1; }
done
"$python" "$src/tools/check_hf_export_llama.py" --case hf_llama:logits_llama:LlamaForCausalLM \
  --case hf_qwen2:logits_qwen2:Qwen2ForCausalLM \
  --case hf_mistral:logits_mistral:MistralForCausalLM \
  --sample hf_llama:prompt.txt:sample_llama.txt:24 \
  --sample hf_qwen2:prompt.txt:sample_qwen2.txt:24 || fail=1
# tide import of the exported Llama folder takes its tokenizer.json too (tide reads Llama 3's),
# and samples as the run it came from.
"$tide" import --hf-dir hf_llama --out imported/model.ckpt > import.log 2>&1 \
  || { cat import.log; exit 1; }
grep -q "^tokenizer: imported/tokenizer.json" import.log \
  && cmp -s imported/tokenizer.json hf_llama/tokenizer.json \
  || { echo "FAILED: the import did not take the folder's tokenizer.json"; cat import.log; fail=1; }
"$tide" sample --checkpoint imported/model.ckpt --prompt "$(cat prompt.txt)" --tokens 24 \
  --top-k 1 > sample_imported.txt 2> sample.err || { cat sample.err; exit 1; }
cmp -s sample_imported.txt sample_llama.txt \
  && echo "ok: tide sample of the re-imported export = of the run: $(cat sample_llama.txt)" \
  || { echo "FAILED: re-imported sample differs: $(cat sample_imported.txt)"; fail=1; }
expect_error "export --architecture qwen2: the model has no q/k/v biases" \
  export --checkpoint llama/model.ckpt --out-dir bad --architecture qwen2
expect_error "export --architecture llama: the model has q/k/v biases" \
  export --checkpoint qwen2/model.ckpt --out-dir bad --architecture llama
exit $fail
