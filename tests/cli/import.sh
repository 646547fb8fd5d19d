#!/usr/bin/env bash
# `tide import`: the committed Hugging Face fixture becomes a tide checkpoint whose `tide export`
# holds the fixture's tensors bit for bit; bad input is one error line and creates nothing.
# A trained run, exported and imported back (with its tokenizer), samples, and a run started
# from it with init_from has, at step 0, the validation loss the first run ended with; a shape
# mismatch stops init_from before out_dir is written; without model.* keys init_from (the HF
# folder or its import) sets the model, and config.json resumes the run without init_from.
set -uo pipefail
tide=$1 fixture=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
fail=0
source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"

# 1. HF -> tide -> HF, bitwise.
"$tide" import --hf-dir "$fixture" --out imp/model.ckpt > import.log || { cat import.log; exit 1; }
cat import.log
grep -q "sample. needs one" import.log || { echo "FAILED: no word about the tokenizer"; fail=1; }
"$tide" export --quiet --checkpoint imp/model.ckpt --out-dir back > /dev/null || fail=1
python3 - "$fixture/model.safetensors" back/model.safetensors <<'PY' || fail=1
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
for k in a:
    assert a[k] == b[k], k
print(f"ok: {len(a)} tensors bitwise identical after import + export")
PY

# 2. Refusals: one line, nothing created.
mkdir -p relu && cp "$fixture/model.safetensors" relu/
sed 's/"gelu_new"/"relu"/' "$fixture/config.json" > relu/config.json
expect_error "'activation_function' is \"relu\"; tide cannot represent it" import --hf-dir relu --out o1/m.ckpt
mkdir -p noconf && cp "$fixture/model.safetensors" noconf/
expect_error "has no config.json" import --hf-dir noconf --out o1/m.ckpt
mkdir -p cut && cp "$fixture/config.json" cut/ && head -c 5000 "$fixture/model.safetensors" > cut/model.safetensors
expect_error "is truncated" import --hf-dir cut --out o1/m.ckpt
expect_error "exists; pass --overwrite" import --hf-dir "$fixture" --out imp/model.ckpt
test ! -e o1 || { echo "FAILED: a refused import created its output"; fail=1; }

# 3. A trained run -> HF -> tide with its tokenizer: sample, and init_from.
for i in $(seq 1 60); do echo "line $i of a small corpus, the quick brown fox $((i * 7))"; done > text.txt
"$tide" prepare --input text.txt --out-dir data --vocab-size 300 > prepare.log 2>&1 \
  || { cat prepare.log; exit 1; }
tiny=(data.dir=data model.n_layer=1 model.n_head=2 model.n_embd=8 seq_len=8
      train_micro_batch_size_per_gpu=2 eval.sequences=2 log.progress=false threads=1
      scheduler.params.warmup_num_steps=2 optimizer.params.lr=0.01)
expect_error "has 300 tokens but the model's vocab_size is 64" \
  import --hf-dir "$fixture" --out o2/m.ckpt --tokenizer data/tokenizer.json
test ! -e o2 || { echo "FAILED: a refused import created its output"; fail=1; }
"$tide" train "${tiny[@]}" train_steps=4 out_dir=runs/a > a.log 2>&1 || { cat a.log; exit 1; }
"$tide" export --quiet --checkpoint runs/a/model.ckpt --out-dir hf_a > /dev/null || fail=1
"$tide" import --hf-dir hf_a --out imp_a/model.ckpt --tokenizer data/tokenizer.json > ia.log \
  || { cat ia.log; fail=1; }
"$tide" sample --checkpoint imp_a/model.ckpt --tokens 5 > sample.log 2>&1 \
  || { echo "FAILED: sample of the imported checkpoint"; cat sample.log; fail=1; }
# Without --tokenizer the exported folder's own tokenizer.json is taken (tide export writes it).
"$tide" import --hf-dir hf_a --out imp_b/model.ckpt > ib.log || { cat ib.log; fail=1; }
grep -q "^tokenizer: imp_b/tokenizer.json" ib.log \
  || { cat ib.log; echo "FAILED: the folder's tokenizer.json was not taken"; fail=1; }
"$tide" sample --checkpoint imp_b/model.ckpt --tokens 5 --seed 3 > sample_b.log 2>&1 \
  || { echo "FAILED: sample of the checkpoint imported with the folder's tokenizer"; cat sample_b.log; fail=1; }
"$tide" sample --checkpoint imp_a/model.ckpt --tokens 5 --seed 3 > sample_a.log 2>&1 || fail=1
cmp -s sample_a.log sample_b.log \
  || { echo "FAILED: the two imports sample differently"; cat sample_a.log sample_b.log; fail=1; }
"$tide" train "${tiny[@]}" train_steps=2 seed=7 init_from=imp_a/model.ckpt out_dir=runs/b \
  > b.log 2>&1 || { cat b.log; fail=1; }
"$tide" train "${tiny[@]}" train_steps=2 seed=7 out_dir=runs/c > c.log 2>&1 || fail=1
python3 - <<'PY' || fail=1
import json
def val(path, step):
    return [r["val_loss"] for r in map(json.loads, open(path)) if "val_loss" in r and r["step"] == step]
a, b, c = val("runs/a/metrics.jsonl", 4), val("runs/b/metrics.jsonl", 0), val("runs/c/metrics.jsonl", 0)
assert a and b and c, (a, b, c)
assert a[-1] == b[0], f"init_from: step-0 val loss {b[0]} != the imported run's final {a[-1]}"
assert c[0] != b[0], "init_from changed nothing (the random init gives the same loss)"
print(f"ok: init_from step-0 val loss {b[0]} == run a's final val loss; random init gives {c[0]}")
PY
expect_error "init_from='imp_a/model.ckpt' holds a model .* but the config gives model.n_embd=16 (init_from's: 8); init_from sets the model's shape: remove these model" \
  train "${tiny[@]}" model.n_embd=16 init_from=imp_a/model.ckpt out_dir=runs/d
test ! -e runs/d || { echo "FAILED: a refused init_from wrote out_dir"; fail=1; }
expect_error "init_from: cannot open checkpoint 'nowhere.ckpt'" train "${tiny[@]}" init_from=nowhere.ckpt out_dir=runs/d

# 4. init_from sets the model (issue #28): no model.* key, from the Hugging Face folder itself
#    (e) and from its import (f), trains bitwise as run g, which restates every key; config.json
#    records the shape, so the run resumes from it without init_from.
steps=(train_steps=5 seed=7 log.interval=1 eval.interval=2)
shapeless=(data.dir=data seq_len=8 train_micro_batch_size_per_gpu=2 eval.sequences=2
           log.progress=false threads=1 scheduler.params.warmup_num_steps=2 optimizer.params.lr=0.01)
"$tide" train "${shapeless[@]}" "${steps[@]}" init_from=hf_a out_dir=runs/e checkpoint.interval=2 \
  > e.log 2>&1 || { cat e.log; fail=1; }
"$tide" train "${shapeless[@]}" "${steps[@]}" init_from=imp_a/model.ckpt out_dir=runs/f > f.log 2>&1 \
  || { cat f.log; fail=1; }
"$tide" train "${tiny[@]}" "${steps[@]}" init_from=imp_a/model.ckpt out_dir=runs/g > g.log 2>&1 \
  || { cat g.log; fail=1; }
cp runs/e/metrics.jsonl e_metrics.jsonl
"$tide" train runs/e/config.json init_from= checkpoint.resume=runs/e/model_step2.ckpt \
  > e2.log 2>&1 || { cat e2.log; fail=1; }
python3 - <<'PY' || fail=1
import json
def losses(path):
    return [(r["step"], r.get("loss", r.get("val_loss"))) for r in map(json.loads, open(path))
            if "loss" in r or "val_loss" in r]
g, e, f = losses("runs/g/metrics.jsonl"), losses("e_metrics.jsonl"), losses("runs/f/metrics.jsonl")
assert len(g) >= 8 and g == e == f, f"init_from without model keys trains differently: {g} {e} {f}"
assert len({l for s, l in g}) > 3, f"the run did not train: {g}"
m = json.load(open("runs/e/config.json"))["model"]
assert (m["n_layer"], m["n_head"], m["n_embd"], m["vocab_size"]) == (1, 2, 8, 300), m
r = losses("runs/e/metrics.jsonl")
assert r == e, f"the resume without init_from differs: {r} vs {e}"
print(f"ok: init_from a folder / a file without model keys == with them: {g}; resumed from step 2 alike")
PY
exit $fail
