#!/usr/bin/env bash
# A bad config stops `tide train` before anything is prepared or written, with one line
# `tide: error: ...` naming the key or file and the fix; an earlier run's files in out_dir are
# never overwritten by accident.
set -uo pipefail
tide=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
fail=0
source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"
same() {  # same <file> <expected content>
  if [ "$(cat "$1")" != "$2" ]; then echo "FAILED: $1 changed: $(cat "$1")"; fail=1; fi
}

# A small corpus and a tiny model, so that a real run takes a second.
for i in $(seq 1 60); do echo "line $i of a small corpus, the quick brown fox $((i * 7))"; done > text.txt
"$tide" prepare --input text.txt --out-dir data --vocab-size 300 > prepare.log 2>&1 \
  || { cat prepare.log; exit 1; }
tiny=(data.dir=data model.n_layer=1 model.n_head=2 model.n_embd=8 seq_len=8
      train_micro_batch_size_per_gpu=2 train_steps=2 eval.sequences=2 log.progress=false threads=1)

# An earlier run in runs/a.
mkdir -p runs/a
echo '{"step": 1, "loss": 9}' > runs/a/metrics.jsonl
echo '{"earlier": true}' > runs/a/config.json
expect_error "comm.timeout_s' must be a number > 0" train comm.timeout_s=0
expect_error "comm.timeout_s' must be a number > 0" train comm.timeout_s=-5
expect_error "'optimizer.params.eps' must be a number > 0 (got 0)" \
  train "${tiny[@]}" out_dir=runs/a optimizer.params.eps=0
expect_error "'scheduler.params.cos_min_ratio' must be a number in \[0, 1\] (got 2)" \
  train "${tiny[@]}" out_dir=runs/a scheduler.params.cos_min_ratio=2
expect_error "out_dir 'runs/a' already holds an earlier run (metrics.jsonl, config.json)" \
  train "${tiny[@]}" out_dir=runs/a
same runs/a/metrics.jsonl '{"step": 1, "loss": 9}'
same runs/a/config.json '{"earlier": true}'
"$tide" train "${tiny[@]}" out_dir=runs/a out_dir_overwrite=true > over.log 2>&1 \
  || { echo "FAILED: out_dir_overwrite=true"; cat over.log; fail=1; }
grep -q '"loss": 9' runs/a/metrics.jsonl && { echo "FAILED: not overwritten"; fail=1; }
# More steps resume in place, on a new lr schedule only when asked (the default cosine spans
# train_steps; step 3 happens to get the same lr from both schedules, so the refusal names
# step 4, the first that differs; train_steps=3 alone resumes).
expect_error "another learning-rate schedule than this run's (train_steps 2 -> 5, .*step 4 would run at lr .*checkpoint.new_lr_schedule=true" \
  train "${tiny[@]}" train_steps=5 out_dir=runs/a checkpoint.resume=runs/a/model.ckpt
"$tide" train "${tiny[@]}" train_steps=3 out_dir=runs/a checkpoint.resume=runs/a/model.ckpt \
  checkpoint.new_lr_schedule=true > resume.log 2>&1 || { echo "FAILED: resume in place"; cat resume.log; fail=1; }
grep -q '"step":3' runs/a/metrics.jsonl || { echo "FAILED: resume did not append"; fail=1; }

# Narrowing and ranges.
expect_error "'train_micro_batch_size_per_gpu' must be an integer in \[1, 65536\] (got 4294967300)" \
  train train_micro_batch_size_per_gpu=4294967300
expect_error "'seq_len' must be an integer in \[1, 1048576\] (got 99999999999)" train seq_len=99999999999
expect_error "'threads' must be an integer in \[0, 4096\] (got -3)" train threads=-3
expect_error "'eval.interval' must be an integer >= 0 (got -1)" train eval.interval=-1
expect_error "'checkpoint.interval' must be an integer >= 0 (got -1)" train checkpoint.interval=-1
expect_error "'seed' must be a non-negative integer (got -1)" train seed=-1
expect_error "data.val 'nope.bin' does not exist" train "${tiny[@]}" data.val=nope.bin

# Config files that are not an object of keys, or not a file.
echo '[1, 2]' > list.json
expect_error "config file 'list.json' holds a JSON array, not an object" train list.json
expect_error "config file 'list.json' holds a JSON array" train list.json train_steps=3
echo '{"optimizer": 5}' > section.json
expect_error "config key 'optimizer' must be an object" train section.json
expect_error "config key 'optimizer' is 5 in the config file" train section.json optimizer.params.lr=1e-3
expect_error "config file 'data' is a directory" train data

# A DeepSpeed config with four keys tide does not know (steps_per_print it knows): one error
# lists them all.
cat > ds.json <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10, "prescale_gradients": false,
 "optimizer": {"type": "AdamW", "params": {"lrr": 1e-3, "beta": [0.9, 0.95]}},
 "zero_optimization": {"stage": 0, "elastic_checkpoint": true}}
JSON
expect_error "4 unknown config keys: .*'optimizer.params.lrr' (did you mean 'optimizer.params.lr'?).*'zero_optimization.elastic_checkpoint'" \
  train ds.json

# Broken files inside a data directory.
mkdir -p bad && cp data/train.bin data/val.bin data/tokenizer.json bad/
echo '{"vocab_size": "many"}' > bad/meta.json
# The CPU GEMMs' environment variables (kernels/cpu/gemm_bf16.h, gemm_f32.h): a bad value names
# the choices. (Each is read at the first product it serves: the error comes from the first step.)
export TIDE_CPU_BF16_GEMM=bogus
expect_error "TIDE_CPU_BF16_GEMM='bogus': use amx, avx512bf16 or reference" \
  train "${tiny[@]}" bf16.enabled=true train_steps=1 out_dir=runs/gemm_env
unset TIDE_CPU_BF16_GEMM
export TIDE_CPU_F32_GEMM=bogus
expect_error "TIDE_CPU_F32_GEMM='bogus': use avx512, avx2 or openblas" \
  train "${tiny[@]}" train_steps=1 out_dir=runs/gemm_env_f32
unset TIDE_CPU_F32_GEMM
expect_error "bad/meta.json: unreadable: field .* re-create it with \`tide prepare" train "${tiny[@]}" data.dir=bad
exit $fail
