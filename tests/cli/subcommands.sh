#!/usr/bin/env bash
# The planning subcommands run and print what they promise.
set -euo pipefail
tide=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
"$tide" --help | grep -q "estimate"
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
