#!/usr/bin/env bash
# Bad input: exit code 1 and one line `tide: error: ...` naming the problem.
set -uo pipefail
tide=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
fail=0
source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"
expect_error "did you mean 'train_steps'" train trian_steps=5
expect_error "must be an integer" train train_steps=abc
expect_error "cannot open config file" train missing.json
echo '{"seq_len": 64, "model": {"max_seq_len": 32}}' > long.json
expect_error "seq_len 64 exceeds model.max_seq_len 32" train long.json
expect_error "does not exist" train data.dir=nowhere
expect_error "cannot open checkpoint" sample --checkpoint nowhere.ckpt
printf 'hello' > junk.ckpt
expect_error "checkpoint 'junk.ckpt' is truncated" sample --checkpoint junk.ckpt
expect_error "is a directory" sample --checkpoint .
expect_error "cannot open checkpoint 'nowhere.ckpt'" train checkpoint.resume=nowhere.ckpt
expect_error "checkpoint 'junk.ckpt' is truncated" train checkpoint.resume=junk.ckpt
expect_error "'eval.sequences' must be an integer >= 1" train eval.sequences=0
# The '.partial' folder of a sharded save that never completed: every command says what it is
# and names the committed checkpoint instead (issue #24: train suggested X.partial/model.ckpt).
mkdir -p runs/model_step5.ckpt.partial
partial="'runs/model_step5.ckpt.partial' is an uncommitted checkpoint: .* never completed, so tide never loads it; name a committed checkpoint instead (an earlier model_step<N>.ckpt or model.ckpt in 'runs')"
expect_error "checkpoint.resume: $partial" train checkpoint.resume=runs/model_step5.ckpt.partial
expect_error "init_from: $partial" train init_from=runs/model_step5.ckpt.partial
expect_error "$partial" sample --checkpoint runs/model_step5.ckpt.partial
expect_error "$partial" export --checkpoint runs/model_step5.ckpt.partial --out-dir hf
expect_error "export --dtype 'fp8': .*pass --dtype f32 or --dtype bf16" export \
  --checkpoint runs/model_step5.ckpt.partial --out-dir hf --dtype fp8
# ... and when the save did complete later (its index.json is all a directory needs to be
# taken for a sharded checkpoint by the config check), the message names it.
mkdir -p runs/done.ckpt runs/done.ckpt.partial && echo '{}' > runs/done.ckpt/index.json
expect_error "name the committed checkpoint 'runs/done.ckpt' instead" \
  train checkpoint.resume=runs/done.ckpt.partial/
expect_error "temperature must be positive" sample --temperature 0
expect_error "tokens must be at least 1" sample --tokens 0
expect_error "samples must be at least 1" sample --samples 0
expect_error "top-k must be >= 0" sample --top-k -1
exit $fail
