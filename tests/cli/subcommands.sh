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
test -s s.svg && python3 -c "import json; json.load(open('t.json'))['traceEvents']"
# `tide help` is `tide --help` (it was refused with rc 109), `tide help train` `tide train --help`.
diff <("$tide" help) <("$tide" --help)
diff <("$tide" help train) <("$tide" train --help)
# tide estimate's table: one unit that fits its figures (GiB for GPT-2 124M on 4 ranks, MiB for
# a small model), '-' where a figure is 0 (no 0.00), the per-host column explained, and at
# data-parallel size 1 the ZeRO-1/2/3 rows (equal to DDP there) folded into DDP's.
grep -q '^GiB; per-GPU columns' est.txt && grep -q '^ ZeRO-1 ' est.txt
grep -q "per host = one host's memory for its 4 GPUs" est.txt
"$tide" estimate --layers 2 --hidden 64 --heads 2 --vocab 256 --seq 64 --zero-stage 2 | tee small.txt
grep -q '^MiB; per-GPU columns' small.txt
grep -q 'ZeRO-1/2/3 without offload are not shown: at data-parallel size 1 .* (the configured ZeRO-2 is the DDP row marked \*)' small.txt
! grep -q '^.ZeRO-[123] ' small.txt
grep -q '^\*DDP  *none ' small.txt
! grep -q '0\.00' small.txt
grep -q '^ DDP  *selective .* -  yes$' small.txt  # per host: nothing on the host
"$tide" estimate --layers 2 --hidden 64 --heads 2 --vocab 256 --seq 64 --json \
  | python3 -c "
import json, sys
o = json.load(sys.stdin)['options']
assert all(r['equal_to_ddp'] == (r['zero_stage'] > 0 and r['offload'] == 'none') for r in o)
ddp = {r['recompute']: r['device']['total'] for r in o if r['option'] == 'DDP'}
assert all(r['device']['total'] == ddp[r['recompute']] for r in o if r['equal_to_ddp']), 'ZeRO at dp 1 is not DDP'
"
