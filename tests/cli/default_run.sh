#!/usr/bin/env bash
# The embedded default, shortened: `tide train` with no config prepares the fortunes corpus,
# trains, evaluates, writes a checkpoint; `tide sample` then generates from it.
set -euo pipefail
tide=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
"$tide" train train_steps=4 eval.sequences=8 log.interval=2 log.progress=false > train.log 2>&1 \
  || { cat train.log; exit 1; }
cat train.log
grep -q "unigram baseline" train.log
grep -q "step      4/4" train.log
test -s data/fortunes/train.bin -a -s data/fortunes/tokenizer.json
test -s runs/default/model.ckpt -a -s runs/default/metrics.jsonl -a -s runs/default/config.json
grep -q '"val_loss"' runs/default/metrics.jsonl
out=$("$tide" sample --tokens 20 --prompt "The ")
echo "sample: $out"
case "$out" in "The "*) ;; *) echo "sample does not start with the prompt"; exit 1;; esac
# --ignore-eot keeps going to --tokens.
out=$("$tide" sample --tokens 200 --ignore-eot)
[ "${#out}" -ge 100 ] || { echo "--ignore-eot gave ${#out} characters for 200 tokens"; exit 1; }
