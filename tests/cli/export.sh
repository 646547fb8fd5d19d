#!/usr/bin/env bash
# `tide export`: a sharded checkpoint (made by bench_export_fixture) becomes a Hugging Face
# folder; an existing export is not overwritten without --overwrite; bad input is one error line
# and creates nothing.
set -uo pipefail
tide=$1 fixture=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
fail=0
source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"
"$fixture" --out fx --n-layer 2 --n-head 2 --n-embd 32 --vocab 50 --seq 16 --tokens 8 --world 3 \
  > fixture.log || { cat fixture.log; exit 1; }
"$tide" export --checkpoint fx/ckpt --out-dir hf > export.log || { cat export.log; exit 1; }
cat export.log
grep -q "export: 100%" export.log || { echo "FAILED: no progress lines"; fail=1; }
# The fixture is trained on raw token shards: it names no tokenizer, so none is written.
grep -q "^no tokenizer: the checkpoint names none" export.log || { echo "FAILED: no word about the tokenizer"; fail=1; }
test ! -e hf/tokenizer.json -a ! -e hf/generation_config.json || { echo "FAILED: tokenizer files without a tokenizer"; fail=1; }
test -s hf/model.safetensors -a -s hf/config.json || { echo "FAILED: no output files"; fail=1; }
python3 - <<'PY' || fail=1
import json, struct
cfg = json.load(open("hf/config.json"))
assert cfg["model_type"] == "gpt2" and cfg["n_layer"] == 2 and cfg["n_embd"] == 32, cfg
raw = open("hf/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
assert h["__metadata__"] == {"format": "pt"}, h["__metadata__"]
assert h["transformer.h.1.mlp.c_fc.weight"]["shape"] == [32, 128], h["transformer.h.1.mlp.c_fc.weight"]
assert "lm_head.weight" not in h and len(h) == 1 + 2 + 2 * 12 + 2
print("ok: export header and config")
PY
expect_error "exists; pass --overwrite" export --checkpoint fx/ckpt --out-dir hf
# An earlier export's tokenizer files do not survive an --overwrite without a tokenizer.
echo '{}' > hf/tokenizer.json && echo '{}' > hf/tokenizer_config.json
"$tide" export --quiet --checkpoint fx/ckpt --out-dir hf --overwrite > /dev/null || fail=1
test ! -e hf/tokenizer.json -a ! -e hf/tokenizer_config.json || { echo "FAILED: stale tokenizer files left"; fail=1; }
# A tokenizer larger than the model's vocabulary (50) is refused before anything is written.
for i in $(seq 1 40); do echo "line $i of a small corpus, the quick brown fox $((i * 7))"; done > text.txt
"$tide" prepare --input text.txt --out-dir data --vocab-size 300 > prepare.log 2>&1 || { cat prepare.log; fail=1; }
expect_error "tokenizer 'data/tokenizer.json' has [0-9]* tokens but the model's vocab_size is 50" \
  export --checkpoint fx/ckpt --out-dir out --tokenizer data/tokenizer.json
expect_error "cannot open checkpoint 'nowhere.ckpt'" export --checkpoint nowhere.ckpt --out-dir out
expect_error "has no index.json" export --checkpoint fx --out-dir out
printf 'hello' > junk.ckpt
expect_error "checkpoint 'junk.ckpt' is truncated" export --checkpoint junk.ckpt --out-dir out
rm fx/ckpt/shard-00001-of-00003.safetensors
expect_error "is missing" export --checkpoint fx/ckpt --out-dir out
test ! -e out || { echo "FAILED: a refused export created its output folder"; fail=1; }
# tide sample reads sharded checkpoints too, and refuses this damaged one the same way.
expect_error "is missing" sample --checkpoint fx/ckpt
exit $fail
