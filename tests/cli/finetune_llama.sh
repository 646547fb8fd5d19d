#!/usr/bin/env bash
# The README's fine-tuning example, examples/finetune_llama.sh, as it is (issue #28): import a
# Llama folder, prepare prompt/completion records with its tokenizer.json, fine-tune with
# ZeRO-Offload, export, and transformers' greedy answer equals `tide sample --top-k 1`'s.
# Needs torch and transformers in "${TIDE_PYTHON:-python3}"; skips (77) without them.
set -uo pipefail
tide=$1 src=$2 dir=$3
python=${TIDE_PYTHON:-python3}
# find_spec: whether they are installed, without importing them (importing takes ~5 s).
if ! "$python" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('transformers') and u.find_spec('torch')))" 2> /dev/null; then
  echo "SKIPPED: $python has no transformers/torch (pip install -r tools/requirements-test.txt)"
  exit 77
fi
rm -rf "$dir" && mkdir -p "$dir" || exit 1
# One thread each for tide and torch: the models are tiny, and beside other tests (ctest -j2)
# more threads only contend.
export OMP_NUM_THREADS=1
TIDE="$tide" PYTHON="$python" bash "$src/examples/finetune_llama.sh" "$dir"
