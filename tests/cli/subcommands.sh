#!/usr/bin/env bash
# The planning subcommands run and print what they promise.
set -euo pipefail
tide=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
"$tide" --help | grep "estimate" > /dev/null
# --version: the CMake project version, then the git commit when the build was configured in a
# checkout.
"$tide" --version | grep -Eq '^tide [0-9]+\.[0-9]+\.[0-9]+( \(git [0-9a-f]{7,}\))?$'
"$tide" estimate --model gpt2-124m --world-size 4 --gpu-mem 16GiB --host-mem 64GiB | tee est.txt
grep -qi "zero" est.txt
"$tide" estimate --model gpt2-124m --world-size 4 --gpu-mem 16GiB --host-mem 64GiB --json \
  | python3 -c "import json,sys; json.load(sys.stdin)"
"$tide" schedule --stages 4 --microbatches 8 --schedule zb-h1 --tf 1 --tb 1 --tw 1 \
  --svg s.svg --trace t.json | tee sched.txt
test -s s.svg
python3 -c "import json; json.load(open('t.json'))['traceEvents']"
# `tide help` is `tide --help` (it was refused with rc 109), `tide help train` `tide train --help`.
diff <("$tide" help) <("$tide" --help)
diff <("$tide" help train) <("$tide" train --help)
# tide estimate's table: one unit that fits its figures (GiB for GPT-2 124M on 4 ranks, MiB for
# a small model), '-' where a figure is 0 (no 0.00), the per-host column explained, and at
# data-parallel size 1 the ZeRO-1/2/3 rows folded into DDP's where their bytes equal DDP's
# (fp16: the same dtypes at every stage).
# (One grep a line: set -e does not stop on the first command of an && list.)
grep -q '^GiB; per-GPU columns' est.txt
grep -q '^ ZeRO-1 ' est.txt
grep -q "per host = one host's memory for its 4 GPUs" est.txt
small=(--layers 2 --hidden 64 --heads 2 --vocab 256 --seq 64)
"$tide" estimate "${small[@]}" --zero-stage 2 --precision fp16 | tee small.txt
grep -q '^MiB; per-GPU columns' small.txt
grep -q 'ZeRO-1/2/3 without offload are not shown: at data-parallel size 1 .* (the configured ZeRO-2 is the DDP row marked \*)' small.txt
# (Not `! grep`: set -e does not stop on a negated command, so that line could never fail.)
absent() { if grep -q "$1" "$2"; then echo "FAILED: '$1' in $2" >&2; exit 1; fi; }
absent '^.ZeRO-[123] ' small.txt
grep -q '^\*DDP  *none ' small.txt
absent '0\.00' small.txt
grep -q '^ DDP  *selective .* -  yes$' small.txt  # per host: nothing on the host
# bf16 (the default): DDP keeps f32 gradients (DeepSpeed's default at stage 0), ZeRO-1/2/3 bf16
# ones, so at data-parallel size 1 they differ from DDP and are shown.
"$tide" estimate "${small[@]}" --zero-stage 2 | tee small_bf16.txt
absent 'not shown' small_bf16.txt
grep -q '^\*ZeRO-2  *none ' small_bf16.txt
grep -q '^ DDP  *none ' small_bf16.txt
# JSON: equal_to_ddp marks exactly the ZeRO rows without offload whose bytes are DDP's (same
# recompute): every one in fp16, none in bf16.
for precision in fp16 bf16; do
  "$tide" estimate "${small[@]}" --precision $precision --json | python3 -c "
import json, sys
precision = sys.argv[1]
o = json.load(sys.stdin)['options']
ddp = {r['recompute']: r for r in o if r['option'] == 'DDP'}
for r in o:
    same = r['zero_stage'] > 0 and r['offload'] == 'none' and all(
        r[k] == ddp[r['recompute']][k] for k in ('device', 'host'))
    assert r['equal_to_ddp'] == same, (precision, r['option'], r['recompute'])
zero = [r for r in o if r['zero_stage'] > 0 and r['offload'] == 'none']
assert all(r['equal_to_ddp'] == (precision == 'fp16') for r in zero), precision
assert all(r['grad_precision'] == ('fp32' if precision == 'bf16' else precision) for r in ddp.values())
" $precision
done
# placement.policy=auto on a GPU without a limit: the budget of an empty GPU of --gpu-mem (less
# the 5% margin, at least 2 GiB), which it then needs; without --gpu-mem a clear error.
"$tide" estimate "${small[@]}" --placement auto device=cuda --gpu-mem 80GiB | tee auto.txt
grep -q '^device_memory_limit 76.00 GiB: ' auto.txt
if "$tide" estimate "${small[@]}" --placement auto device=cuda > auto_err.txt 2>&1; then
  echo "FAILED: auto on cuda without --gpu-mem was accepted" >&2
  exit 1
fi
grep -q "placement.policy=auto on a GPU takes its budget from the GPU's free memory: give the GPU's memory with --gpu-mem" auto_err.txt
