#!/usr/bin/env bash
# chaos.sh MPIEXEC TIDE SOURCE_DIR WORK_DIR: a relaunch loop survives random SIGKILLs.
# A 3-rank ZeRO-3 run (default thresholds) with checkpoint.interval=5 is launched with
# checkpoint.resume=auto; three times a random rank is SIGKILLed at a random moment (checkpoint
# writes included) and the same command is launched again; the fourth launch runs to the end.
# Checked: every relaunch resumes from a committed checkpoint (never a .partial one) no older
# than the newest committed before the kill, the final checkpoint's tensors (weights and Adam
# state) equal the uninterrupted run's bitwise, and metrics.jsonl logs every step once with
# the uninterrupted run's losses. CHAOS_SEED=<n> replays a sequence of kills.
set -uo pipefail
mpiexec=$1 tide=$2 src=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
mpi=("$mpiexec" --oversubscribe --allow-run-as-root)
fail() { echo "FAIL: $*"; exit 1; }
seed=${CHAOS_SEED:-$(date +%s)}
RANDOM=$seed
echo "chaos seed $seed (CHAOS_SEED=$seed replays it)"

"$tide" prepare --input "$src/README.md" "$src/docs" --out-dir data --vocab-size 300 \
  > prepare.log 2>&1 || { cat prepare.log; fail "tide prepare"; }
# Long enough that the three kills (each 0.3-1.5 s after an attempt's first step, 4.5 s at
# most in all) land before the run ends: 3000 steps take about 7 s of stepping on the 2-core VM
# with OpenBLAS's AVX-512 kernels (1500 steps with kills up to 3 s ended before a kill once).
steps=3000
cmd=(train data.dir=data model.n_layer=2 model.n_head=2 model.n_embd=32 seq_len=32
  train_micro_batch_size_per_gpu=2 threads=1 log.progress=false log.interval=1 eval.interval=0
  eval.sequences=4 train_steps=$steps checkpoint.interval=5 zero_optimization.stage=3)

timeout 300 "${mpi[@]}" -np 3 "$tide" "${cmd[@]}" out_dir=ref > ref.log 2>&1 \
  || { tail ref.log; fail "the uninterrupted run"; }

source "$(dirname "${BASH_SOURCE[0]}")/mpi_procs.sh"  # rank_pid
# The newest step among the committed checkpoints in run/ (0 when none).
newest_committed() {
  local best=0 s d
  for d in run/model_step*.ckpt; do
    [ -f "$d/index.json" ] || continue
    s=${d#run/model_step}; s=${s%.ckpt}
    [ "$s" -gt "$best" ] && best=$s
  done
  echo $best
}

floor=0  # no relaunch may resume from before this step
for attempt in 1 2 3 4; do
  "${mpi[@]}" -np 3 "$tide" "${cmd[@]}" out_dir=run checkpoint.resume=auto > run$attempt.log 2>&1 &
  mpirun_pid=$!
  trap 'kill -KILL $mpirun_pid 2>/dev/null' EXIT
  if [ $attempt -le 3 ]; then
    victim_rank=$((RANDOM % 3))
    delay_ms=$((300 + RANDOM % 1200))
    victim=$(rank_pid $mpirun_pid $victim_rank) || { cat run$attempt.log; fail "rank $victim_rank not found"; }
    for _ in $(seq 600); do grep -q "^step " run$attempt.log && break; sleep 0.1; done
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    kill -0 $mpirun_pid 2>/dev/null || { cat run$attempt.log; fail "attempt $attempt ended before its kill"; }
    kill -KILL "$victim"
    wait $mpirun_pid; rc=$?
    [ $rc -ne 0 ] || fail "attempt $attempt exited 0 after rank $victim_rank was killed"
    last=$(sed -n 's/^step \+\([0-9]\+\)\/.*/\1/p' run$attempt.log | tail -1)
    partial=$(ls -d run/*.partial 2>/dev/null | tr '\n' ' ')
    echo "attempt $attempt: SIGKILL to rank $victim_rank ${delay_ms} ms after its first step (last logged step ${last:-none}; left behind: ${partial:-no .partial})"
  else
    wait $mpirun_pid; rc=$?
    [ $rc -eq 0 ] || { tail run$attempt.log; fail "the last attempt exited $rc"; }
  fi
  if [ $attempt -gt 1 ]; then
    from=$(sed -n 's/^tide: checkpoint.resume=auto: the newest complete checkpoint is \(.*\) (step \([0-9]*\))$/\1 \2/p' run$attempt.log)
    [ -n "$from" ] || { head -3 run$attempt.log; fail "attempt $attempt did not resume"; }
    read -r path step <<<"$from"
    [[ $path =~ ^run/model_step[0-9]+\.ckpt$ ]] || fail "attempt $attempt resumed from '$path'"
    [ "$step" -ge "$floor" ] || fail "attempt $attempt resumed from step $step, older than step $floor"
    echo "attempt $attempt resumed from $path"
  fi
  floor=$(newest_committed)
done

# Every tensor of every shard of the final checkpoints, bitwise.
python3 - ref/model.ckpt run/model.ckpt <<'EOF' || fail "the final checkpoint differs from the uninterrupted run's"
import json, struct, sys, glob, os
def tensors(d):
    out = {}
    for f in sorted(glob.glob(os.path.join(d, "shard-*.safetensors"))):
        b = open(f, "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + n])
        for k, v in h.items():
            if k != "__metadata__":
                s, e = v["data_offsets"]
                out[os.path.basename(f) + ":" + k] = b[8 + n + s:8 + n + e]
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a and a.keys() == b.keys(), "different tensors"
bad = [k for k in a if a[k] != b[k]]
print(f"{len(a)} tensor pieces compared, {len(bad)} differ {bad[:5]}")
sys.exit(1 if bad else 0)
EOF
# step, grad_norm, loss, lr of every training line: each step once, as in the uninterrupted run
losses() { sed -n 's/.*"grad_norm":\([^,]*\),"loss":\([^,]*\),"lr":\([^,]*\),"step":\([0-9]*\).*/\4 \1 \2 \3/p' "$1"; }
diff <(losses ref/metrics.jsonl) <(losses run/metrics.jsonl) > /dev/null \
  || { diff <(losses ref/metrics.jsonl) <(losses run/metrics.jsonl) | head; fail "metrics.jsonl differs"; }
[ "$(grep -c '"event":"resume"' run/metrics.jsonl)" -eq 3 ] || fail "metrics.jsonl does not mark 3 resumes"
echo "OK: 3 random SIGKILLs, 3 auto-resumes, final model bitwise the uninterrupted run's"
