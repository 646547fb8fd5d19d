#!/usr/bin/env bash
# bench_kernels --dtype: every op runs with 16-bit storage and each line names its dtype; a bad
# dtype is one clear error.
set -uo pipefail
bench=$1
fail=0
for dt in bf16 f16; do
  out=$("$bench" --B 1 --T 8 --C 16 --NH 2 --V 50 --reps 1 --threads 1 --dtype "$dt") \
    || { echo "FAIL: --dtype $dt exited $?"; fail=1; continue; }
  n=$(grep -c '"bench":"kernels"' <<<"$out")
  m=$(grep -c "\"dtype\":\"$dt\"" <<<"$out")
  [ "$n" -ge 20 ] && [ "$n" -eq "$m" ] || { echo "$out"; echo "FAIL: $dt: $m of $n lines say $dt"; fail=1; }
done
err=$("$bench" --dtype f8 2>&1) && { echo "FAIL: --dtype f8 accepted"; fail=1; }
grep -q "unknown dtype 'f8'; use one of f32, bf16, f16" <<<"$err" \
  || { echo "$err"; echo "FAIL: no clear error for --dtype f8"; fail=1; }
[ $fail -eq 0 ] && echo "bench_kernels --dtype: ok"
exit $fail
