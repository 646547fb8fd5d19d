#!/usr/bin/env bash
# bench_gpt_gpu on the simulated device (the GPU runs are scripts/gpu_check.sh's): with a device
# budget, --B 0 tries 64, 32, ... and takes the first micro-batch whose steps fit (the tried
# ones are listed with their out-of-memory error), the steps train (the loss falls) and the
# FLOP count is llm.c's 6N + 6LCT; its PyTorch peer (gpt_torch.py) on the CPU counts the same
# parameters and FLOPs for the same shape (skipped without torch in ${TIDE_PYTHON:-python3}).
set -uo pipefail
bench=$1 src=$2
fail=0
py=${TIDE_PYTHON:-python3}
model=(--set model.n_layer=2 --set model.n_embd=64 --set model.n_head=4 --set model.vocab_size=512
  --set threads=1 --T 32)
shape=("${model[@]}" --steps 3 --warmup 1)
out=$("$bench" --models custom "${shape[@]}" --B 0 --device sim --dtype bf16 \
  --set placement.device_memory_limit=4000000 --peak-tflops 1) ||
  { echo "FAIL: bench_gpt_gpu exited $?"; exit 1; }
echo "$out"
"$py" - "$out" <<'PY' || fail=1
import json, sys
j = json.loads(sys.argv[1])
L, C, T, N = 2, 64, 32, j["params"]
checks = {
    "B is the first that fits the 4 MB budget": j["B"] == 4,
    "the larger ones were tried and ran out of memory":
        [t["B"] for t in j["tried"]] == [64, 32, 16, 8]
        and all("out of sim:0 memory" in t["error"] for t in j["tried"]),
    "the loss falls": j["loss_last"] < j["loss_first"],
    "6N + 6LCT": j["flops_per_token"] == 6 * N + 6 * L * C * T,
    "MFU = TFLOP/s over the peak": abs(j["mfu"] - j["tflops"]) < 1e-12,
    "tokens/s from the median step": abs(j["tokens_per_s"] - 4 * T / (j["step_ms"] / 1e3)) < 1e-6,
}
for what, ok in checks.items():
    if not ok:
        print(f"FAIL: {what}")
sys.exit(0 if all(checks.values()) else 1)
PY
err=$("$bench" --models custom --dtype f8 2>&1) && { echo "FAIL: --dtype f8 accepted"; fail=1; }
grep -q "dtype f8: use f32, bf16 or fp16" <<<"$err" || { echo "$err"; echo "FAIL: no clear error"; fail=1; }
if "$py" -c "import torch" 2>/dev/null; then
  peer=$("$py" "$src/bench/gpu/gpt_torch.py" --models custom:2x4x64x512 --T 32 --B 4 --steps 2 \
    --warmup 1 --device cpu --no-compile) || { echo "FAIL: gpt_torch.py exited $?"; exit 1; }
  echo "$peer"
  "$py" - "$out" "$peer" <<'PY' || fail=1
import json, sys
tide, torch = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ok = tide["params"] == torch["params"] and tide["flops_per_token"] == torch["flops_per_token"]
print("same parameters and FLOPs per token" if ok else "FAIL: the peer's model differs")
sys.exit(0 if ok else 1)
PY
else
  echo "gpt_torch.py: skipped (no torch in $py)"
fi
# step_profile.sh (gpu_check's "where a step goes") on the simulated device: one summary per
# mode, the two layers found, the parts within the step.
prof=$(mktemp -d)
summaries=$(bash "$src/bench/gpu/step_profile.sh" "$bench" "$prof" custom 2 "${model[@]}" \
  --device sim | grep '^{"label"') || { echo "FAIL: step_profile.sh"; fail=1; }
"$py" - "$summaries" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
ok = ([r["label"] for r in rows] == ["custom B=2 async", "custom B=2 blocking"]
      and all(r["steps"] == 2 and r["layers.count"] == 2 and r["layers.forward"] > 0
              and 0 <= r["other"] <= r["step_ms"] for r in rows))
print("step_profile: two summaries" if ok else f"FAIL: step_profile summaries {rows}")
sys.exit(0 if ok else 1)
PY
rm -rf "$prof"
[ $fail -eq 0 ] && echo "bench_gpt_gpu: ok"
exit $fail
