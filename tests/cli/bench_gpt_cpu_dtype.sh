#!/usr/bin/env bash
# bench_gpt_cpu --dtype bf16: the training step runs with bf16 parameters, gradients and
# activations (its config line says so, its loss falls as the f32 run's does); a bad dtype is
# one clear error.
set -uo pipefail
bench=$1
fail=0
shape=(--L 2 --H 2 --C 32 --V 64 --T 16 --B 2 --threads 1 --steps 3 --warmup 1 --policies none
  --no-sgemm)
out=$("$bench" "${shape[@]}" --dtype bf16) || { echo "FAIL: --dtype bf16 exited $?"; exit 1; }
grep -q '"kind":"config".*"dtype":"bf16"' <<<"$out" || { echo "$out"; echo "FAIL: no bf16 config"; fail=1; }
grep -q '"kind":"train"' <<<"$out" || { echo "$out"; echo "FAIL: no train line"; fail=1; }
err=$("$bench" --dtype f8 2>&1) && { echo "FAIL: --dtype f8 accepted"; fail=1; }
grep -q "unknown dtype 'f8'; use one of f32, bf16, f16" <<<"$err" \
  || { echo "$err"; echo "FAIL: no clear error for --dtype f8"; fail=1; }
[ $fail -eq 0 ] && echo "bench_gpt_cpu --dtype: ok"
exit $fail
