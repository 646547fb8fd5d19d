#!/usr/bin/env bash
# reliability.sh MPIEXEC TIDE SOURCE_DIR WORK_DIR CASE: end-to-end tests of docs/reliability.md
# on 2 ranks of `tide train` (a tiny model on a corpus prepared from the repository's docs).
#   mismatch  ranks started with different configs exit non-zero at once, with one line naming
#             the keys and the ranks that differ (not MPI_ERR_TRUNCATE, not silent divergence)
#   config_error  a config error that every rank hits (a misspelt key, a resume from an
#             uncommitted '.partial' save; a batch size that does not add up, found by the
#             trainer after the ranks agreed on the config) prints one line `tide: error: ...`, as a single process does, and every rank exits 1: no
#             line per rank, no MPI_ABORT; an error of one rank only (its data.dir) names it
#   frozen    a rank is SIGSTOPped mid-run: with comm.timeout_s=5 every rank exits non-zero
#             within 15 s, naming the stalled operation, the step and the missing rank
#   killed    under ZeRO stage 3 (every step gathers parameters from every rank), SIGKILL to
#             rank 0, then to rank 1 in a second job: every rank exits non-zero within 30 s and
#             the output names the rank and the signal
#   preempt   SIGTERM to one rank mid-run (ZeRO-0, and ZeRO-3 with default thresholds): all
#             ranks stop at the same step, exit 0 with a checkpoint, and the resumed run
#             reproduces the uninterrupted run's losses bitwise; a second signal exits at once
set -uo pipefail
mpiexec=$1 tide=$2 src=$3 dir=$4 case=$5
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
mpi=("$mpiexec" --oversubscribe --allow-run-as-root)
fail() { echo "FAIL: $*"; exit 1; }

"$tide" prepare --input "$src/README.md" "$src/docs" --out-dir data --vocab-size 300 \
  > prepare.log 2>&1 || { cat prepare.log; fail "tide prepare"; }
common=(data.dir=data model.n_layer=2 model.n_head=2 model.n_embd=32 seq_len=32
  train_micro_batch_size_per_gpu=2 threads=1 log.progress=false log.interval=1
  eval.interval=0 eval.sequences=4)

source "$(dirname "${BASH_SOURCE[0]}")/mpi_procs.sh"  # rank_pid
# Waits until file $1 contains $2 (at most $3 seconds).
wait_for() {
  for _ in $(seq $(($3 * 10))); do grep -q -- "$2" "$1" && return 0; sleep 0.1; done
  return 1
}

case $case in
mismatch)
  start=$(date +%s)
  out=$(timeout 60 "${mpi[@]}" -np 1 "$tide" train "${common[@]}" train_steps=5 out_dir=m \
          : -np 1 "$tide" train "${common[@]}" train_steps=5 out_dir=m optimizer.params.lr=3e-4 \
            seed=7 model.n_embd=64 threads=2 2>&1)
  rc=$?
  echo "$out"
  [ $rc -eq 124 ] && fail "the job hung"
  [ $rc -eq 0 ] && fail "the job exited 0 although the ranks disagree"
  want="tide: error: ranks disagree on config: seed (rank 1 differs from rank 0), optimizer.params.lr (rank 1 differs from rank 0), model.n_embd (rank 1 differs from rank 0)"
  [ "$(grep -c 'tide: error' <<<"$out")" -eq 1 ] || fail "expected exactly one error line"
  grep -qxF "$want" <<<"$out" || fail "expected the line: $want"
  grep -q "step " <<<"$out" && fail "a step ran although the ranks disagree"
  echo "OK: rc $rc in $(($(date +%s) - start)) s"
  ;;
config_error)
  # expect_one_error "<line pattern>" mpirun-args...: exit code 1 within 60 s, exactly one
  # line starting `tide: error:`, matching the pattern, no `rank 0:` / `rank 1:` prefix of
  # the abort path and nothing of MPI_ABORT.
  expect_one_error() {
    local pattern=$1 out rc; shift
    out=$(timeout 60 "${mpi[@]}" "$@" 2>&1); rc=$?
    echo "$out"
    [ $rc -eq 124 ] && fail "the job hung"
    [ $rc -eq 1 ] || fail "exit code $rc, not 1"
    [ "$(grep -c '^tide: error:' <<<"$out")" -eq 1 ] || fail "expected exactly one 'tide: error:' line"
    grep -Eq -- "^tide: error: $pattern" <<<"$out" || fail "expected a line: tide: error: $pattern"
    grep -Eq '^rank [0-9]+:' <<<"$out" && fail "a line with the abort path's 'rank R:' prefix"
    grep -qi 'MPI_ABORT' <<<"$out" && fail "the job was aborted (MPI_ABORT)"
    echo "OK: rc $rc, one line"
  }
  expect_one_error "unknown config key 'trian_steps'.*did you mean 'train_steps'" \
    -np 2 "$tide" train "${common[@]}" trian_steps=5 out_dir=c
  mkdir -p c/model_step3.ckpt.partial
  expect_one_error "checkpoint.resume: 'c/model_step3.ckpt.partial' is an uncommitted checkpoint" \
    -np 2 "$tide" train "${common[@]}" train_steps=5 out_dir=c \
    checkpoint.resume=c/model_step3.ckpt.partial
  # Found by the config reader, which knows the ranks (DeepSpeed's batch rule) ...
  expect_one_error "train_batch_size 3 != train_micro_batch_size_per_gpu 2 x gradient_accumulation_steps 1 x data-parallel ranks 2" \
    -np 2 "$tide" train "${common[@]}" train_steps=5 out_dir=c train_batch_size=3 \
    gradient_accumulation_steps=1
  expect_one_error "train_batch_size=3 is not a multiple of train_micro_batch_size_per_gpu 2 x 2 data-parallel ranks = 4" \
    -np 2 "$tide" train "${common[@]}" train_steps=5 out_dir=c train_batch_size=3
  # ... and by the trainer (after the ranks compared their configs), not by the config reader.
  expect_one_error "world_size=3: this run has 2 ranks" \
    -np 2 "$tide" train "${common[@]}" train_steps=5 out_dir=c world_size=3
  # One rank's own problem (data.dir may differ per rank): named with its rank, still one line.
  expect_one_error "rank 1: data.dir 'nowhere' does not exist" \
    -np 1 "$tide" train "${common[@]}" train_steps=5 out_dir=c \
    : -np 1 "$tide" train "${common[@]}" train_steps=5 out_dir=c data.dir=nowhere
  ;;
frozen)
  "${mpi[@]}" -np 2 "$tide" train "${common[@]}" train_steps=100000 out_dir=f \
    comm.timeout_s=5 > run.log 2>&1 &
  mpirun_pid=$!
  victim=$(rank_pid $mpirun_pid 1) || fail "rank 1 not found"
  # Whatever happens, the stopped rank is continued and killed at the end: nothing leaks.
  trap 'kill -CONT $victim 2>/dev/null; kill -KILL $victim 2>/dev/null; kill -KILL $mpirun_pid 2>/dev/null' EXIT
  wait_for run.log "step      2/" 120 || { cat run.log; fail "no step 2"; }
  kill -STOP "$victim"
  stopped=$(date +%s)
  for _ in $(seq 300); do kill -0 $mpirun_pid 2>/dev/null || break; sleep 0.1; done
  took=$(($(date +%s) - stopped))
  if kill -0 $mpirun_pid 2>/dev/null; then cat run.log; fail "still running 30 s after SIGSTOP"; fi
  wait $mpirun_pid; rc=$?
  cat run.log
  [ $rc -eq 0 ] && fail "the job exited 0"
  [ $took -le 15 ] || fail "took $took s to end (limit 15)"
  grep -Eq "tide: error: communication timed out: rank 0 waited [0-9]+ s \(comm.timeout_s = 5\) in all_reduce of [0-9.]+ [KM]?i?B at step [0-9]+; rank 1 did not arrive" run.log \
    || fail "the message does not name the operation, step and missing rank"
  # The stopped rank must be gone (a zombie awaiting its reaper counts as gone).
  for _ in $(seq 30); do
    state=$(awk '/^State/ {print $2}' "/proc/$victim/status" 2>/dev/null)
    [ -z "$state" ] || [ "$state" = Z ] && break
    sleep 0.1
  done
  [ -z "$state" ] || [ "$state" = Z ] || fail "the stopped rank is still alive (state $state)"
  echo "OK: rc $rc, every rank ended $took s after rank 1 was stopped"
  ;;
preempt)
  steps=400
  # ZeRO-0, and ZeRO-3 with its default thresholds (persistent chunks stay gathered).
  for variant in zero0 zero3; do
    extra=(zero_optimization.stage=${variant#zero})
    timeout 300 "${mpi[@]}" -np 2 "$tide" train "${common[@]}" "${extra[@]}" train_steps=$steps \
      out_dir=$variant-a > $variant-a.log 2>&1 || { cat $variant-a.log; fail "$variant: uninterrupted run"; }
    "${mpi[@]}" -np 2 "$tide" train "${common[@]}" "${extra[@]}" train_steps=$steps \
      out_dir=$variant-b > $variant-b.log 2>&1 &
    mpirun_pid=$!
    victim=$(rank_pid $mpirun_pid 1) || fail "rank 1 not found"
    trap 'kill -KILL $mpirun_pid 2>/dev/null' EXIT
    wait_for $variant-b.log "step      5/" 120 || { cat $variant-b.log; fail "$variant: no step 5"; }
    kill -TERM "$victim"  # one rank only: the ranks must agree on the step
    wait $mpirun_pid; rc=$?
    cat $variant-b.log
    [ $rc -eq 0 ] || fail "$variant: the interrupted run exited $rc, not 0"
    ckpt=$(sed -n 's/^tide: resume with the same command plus checkpoint.resume=//p' $variant-b.log)
    [ -n "$ckpt" ] && [ -e "$ckpt" ] || fail "$variant: no resume line with a checkpoint"
    stop_step=$(sed -n 's/.*model_step\([0-9]*\)\.ckpt$/\1/p' <<<"$ckpt")
    [ "$stop_step" -lt $steps ] || fail "$variant: the run was not interrupted (stopped at $stop_step)"
    timeout 300 "${mpi[@]}" -np 2 "$tide" train "${common[@]}" "${extra[@]}" train_steps=$steps \
      out_dir=$variant-b checkpoint.resume="$ckpt" > $variant-c.log 2>&1 \
      || { cat $variant-c.log; fail "$variant: resumed run"; }
    tail -3 $variant-c.log
    # step, grad_norm, loss, lr of every training line (keys are sorted in metrics.jsonl)
    losses() { sed -n 's/.*"grad_norm":\([^,]*\),"loss":\([^,]*\),"lr":\([^,]*\),"step":\([0-9]*\).*/\4 \1 \2 \3/p' "$1"; }
    losses $variant-a/metrics.jsonl > $variant-a.txt; losses $variant-b/metrics.jsonl > $variant-b.txt
    [ "$(wc -l < $variant-a.txt)" -eq $steps ] || fail "$variant: uninterrupted run logged $(wc -l < $variant-a.txt) steps"
    diff $variant-a.txt $variant-b.txt > /dev/null \
      || { diff $variant-a.txt $variant-b.txt | head; fail "$variant: interrupted + resumed != uninterrupted"; }
    echo "OK: $variant stopped at step $stop_step, exit 0; resumed run equals the uninterrupted one bitwise"
  done
  # A second signal ends the process at once (single process here).
  # (A model with ~1 s steps, so the second signal comes while the first step is running.)
  "$tide" train "${common[@]}" model.n_layer=4 model.n_embd=256 seq_len=128 \
    train_micro_batch_size_per_gpu=8 train_steps=100000 out_dir=d > d.log 2>&1 &
  pid=$!
  wait_for d.log "step      1/" 120 || { cat d.log; fail "no step 1"; }
  kill -INT $pid
  wait_for d.log "stop requested" 10 || { cat d.log; fail "the first signal was not seen"; }
  kill -INT $pid
  for _ in $(seq 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  kill -0 $pid 2>/dev/null && { kill -KILL $pid; fail "a second signal did not exit at once"; }
  wait $pid; rc=$?
  cat d.log | tail -3
  [ $rc -eq 130 ] || fail "a second SIGINT exited $rc, not 130"
  echo "OK: a second signal exits at once (rc $rc)"
  ;;
killed)
  for rank in 0 1; do
    "${mpi[@]}" -np 2 "$tide" train "${common[@]}" train_steps=100000 out_dir=k$rank \
      zero_optimization.stage=3 zero_optimization.stage3_param_persistence_threshold=0 \
      > k$rank.log 2>&1 &
    mpirun_pid=$!
    victim=$(rank_pid $mpirun_pid $rank) || fail "rank $rank not found"
    trap 'kill -KILL $mpirun_pid 2>/dev/null' EXIT
    wait_for k$rank.log "step      2/" 120 || { cat k$rank.log; fail "no step 2"; }
    kill -KILL "$victim"
    killed=$(date +%s)
    for _ in $(seq 300); do kill -0 $mpirun_pid 2>/dev/null || break; sleep 0.1; done
    took=$(($(date +%s) - killed))
    if kill -0 $mpirun_pid 2>/dev/null; then cat k$rank.log; fail "still running 30 s after SIGKILL"; fi
    wait $mpirun_pid; rc=$?
    tail -5 k$rank.log
    [ $rc -eq 0 ] && fail "the job exited 0"
    grep -Eiq "rank $rank .*(signal 9|Killed)" k$rank.log || fail "the output does not name rank $rank and its signal"
    for p in $(pgrep -f "out_dir=k$rank"); do fail "a rank survived (pid $p)"; done
    echo "OK: rank $rank killed under ZeRO-3: rc $rc, every rank ended within $took s"
  done
  ;;
*) fail "unknown case $case" ;;
esac
