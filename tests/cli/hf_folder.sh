#!/usr/bin/env bash
# The folder `tide export` writes works in transformers as a Hugging Face model folder does
# (issue #29): AutoTokenizer encodes text to tide's ids, and pipeline("text-generation") gives
# the greedy text `tide sample --top-k 1` gives, for the same prompt and number of new tokens.
# Needs torch and transformers in "${TIDE_PYTHON:-python3}" (tools/requirements-test.txt);
# skips (77) without them.
set -uo pipefail
tide=$1 src=$2 dir=$3
python=${TIDE_PYTHON:-python3}
# find_spec: whether they are installed, without importing them (importing takes ~5 s).
if ! "$python" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('transformers') and u.find_spec('torch')))" 2> /dev/null; then
  echo "SKIPPED: $python has no transformers/torch (pip install -r tools/requirements-test.txt)"
  exit 77
fi
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail=0
# A model that has learnt one paragraph by heart: its greedy continuations are that text, far
# from ties (fp32 rounding of tide's kernels and torch's must not flip a choice), and they end
# with <|endoftext|> (generate() must stop where tide sample stops).
for i in $(seq 1 300); do
  echo "tide is a C++ runtime that trains GPT-style language models, built to combine the memory"
  echo "techniques of ZeRO, ZeRO-Offload, PatrickStar and zero-bubble pipelines as options of one"
  echo "training engine."
  echo "%"
done > corpus.txt
"$tide" prepare --input corpus.txt --doc-separator % --out-dir data --vocab-size 300 \
  > prepare.log 2>&1 || { cat prepare.log; exit 1; }
"$tide" train data.dir=data model.n_layer=2 model.n_head=2 model.n_embd=32 seq_len=64 \
  train_micro_batch_size_per_gpu=8 train_steps=400 optimizer.params.lr=3e-3 eval.interval=0 \
  eval.sequences=2 log.progress=false log.interval=100 threads=1 out_dir=run > train.log 2>&1 \
  || { cat train.log; exit 1; }
"$tide" export --checkpoint run/model.ckpt --out-dir hf > export.log 2>&1 \
  || { cat export.log; exit 1; }
cat export.log
for f in config.json model.safetensors tokenizer.json tokenizer_config.json \
  special_tokens_map.json generation_config.json; do
  test -s "hf/$f" || { echo "FAILED: hf/$f missing"; fail=1; }
done
# tide's own ids for the text: `tide prepare` with the run's tokenizer encodes each file as one
# document (<|endoftext|> first); with --val-fraction 0.5 the first goes to train.bin, the
# second to val.bin (llm.c's format: a 256 x int32 header, then uint16 tokens).
printf 'Hello world' > hello.txt
printf 'Another document.' > other.txt
"$tide" prepare --input hello.txt other.txt --tokenizer run/tokenizer.json --val-fraction 0.5 \
  --out-dir hello > hello.log 2>&1 || { cat hello.log; exit 1; }
tokens=40
for p in 1 2; do
  prompt=$([ $p = 1 ] && echo "tide is a" || echo "Hello")
  "$tide" sample --checkpoint run/model.ckpt --prompt "$prompt" --tokens $tokens --top-k 1 \
    > tide_sample$p.txt 2> sample.err || { cat sample.err; exit 1; }
done
"$python" - $tokens <<'PY' || fail=1
import json, sys
import numpy as np
from transformers import AutoTokenizer, pipeline

n = int(sys.argv[1])
eot = json.load(open("hf/config.json"))["eos_token_id"]
raw = open("hello/train.bin", "rb").read()
tide_ids = [int(i) for i in np.frombuffer(raw[1024:], dtype="<u2")]  # <|endoftext|> "Hello world"
assert tide_ids[0] == eot and len(tide_ids) > 2, tide_ids

tok = AutoTokenizer.from_pretrained("hf")
hf_ids = tok("Hello world")["input_ids"]
assert hf_ids == tide_ids, f"AutoTokenizer: {hf_ids}, tide: {tide_ids}"
plain = tok("Hello world", add_special_tokens=False)["input_ids"]
assert plain == tide_ids[1:], f"add_special_tokens=False: {plain}, tide: {tide_ids[1:]}"
assert tok.decode(plain) == "Hello world", tok.decode(plain)
print(f"ok: AutoTokenizer('Hello world') = {hf_ids} = tide's ({type(tok).__name__})")

gen = pipeline("text-generation", model="hf", device="cpu")
for p, prompt in ((1, "tide is a"), (2, "Hello")):
    out = gen(prompt, max_new_tokens=n, do_sample=False)[0]["generated_text"]
    tide = open(f"tide_sample{p}.txt", encoding="utf-8").read()
    assert tide.endswith("\n"), repr(tide)
    tide = tide[:-1]
    assert out == tide, f"pipeline: {out!r}\ntide sample: {tide!r}"
    assert len(set(out[len(prompt):])) > 5, f"a degenerate continuation proves little: {out!r}"
    print(f"ok: pipeline('text-generation') greedy = tide sample --top-k 1: {out!r}")
PY
exit $fail
