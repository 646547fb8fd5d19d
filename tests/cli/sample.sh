#!/usr/bin/env bash
# `tide sample` writes valid UTF-8 whatever the model emits. A barely trained model samples
# almost any token, byte tokens that start no character among them (issue #24: those bytes went
# to stdout as they were); an incomplete character is held until it completes, and a byte that
# cannot be one becomes U+FFFD (as Hugging Face's decode with errors="replace").
set -uo pipefail
tide=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail=0
# A corpus with 2-, 3- and 4-byte characters, so that merged tokens hold pieces of them too.
for i in $(seq 1 60); do echo "ligne $i: café, naïve, 3€ – 東京 😀 $((i * 7))"; done > text.txt
"$tide" prepare --input text.txt --out-dir data --vocab-size 320 > prepare.log 2>&1 \
  || { cat prepare.log; exit 1; }
"$tide" train data.dir=data model.n_layer=1 model.n_head=2 model.n_embd=16 seq_len=16 \
  train_micro_batch_size_per_gpu=2 train_steps=5 eval.sequences=2 log.progress=false threads=1 \
  out_dir=run > train.log 2>&1 || { cat train.log; exit 1; }
# Every token is possible (--top-k 0) and likelier (--temperature 2): 100 samples of 40 tokens.
"$tide" sample --checkpoint run/model.ckpt --samples 100 --tokens 40 --top-k 0 \
  --temperature 2 > out.txt 2> err.txt || { cat err.txt; exit 1; }
python3 - <<'PY' || fail=1
raw = open("out.txt", "rb").read()
try:
    text = raw.decode("utf-8")
except UnicodeDecodeError as e:
    raise SystemExit(f"FAILED: tide sample wrote invalid UTF-8: {e}")
assert text.count("--- sample ") == 100, "expected 100 samples"
# The samples did meet bytes that start no character (else this test proves nothing).
assert "\ufffd" in text, "no U+FFFD in 100 samples: the model never emitted a stray byte"
print(f"ok: {len(raw)} bytes of valid UTF-8, {text.count(chr(0xfffd))} U+FFFD")
PY
exit $fail
