#!/usr/bin/env bash
# logs.sh MPIEXEC TIDE SOURCE_DIR WORK_DIR: what `tide train` prints (issue #29).
#  - Under mpirun, whether its stdout is a file or a terminal (a pseudo-terminal that `script`
#    makes, as an interactive shell has): whole lines only, no '\r', one line per progress
#    update, from rank 0 alone.
#  - One process on a terminal: the progress line is rewritten in place with '\r' (the mode the
#    first check must not see), and the lines after it start on a line of their own.
#  - An error every rank hits during training: one copy, with no blank line before it.
#  - "trained 1 step", not "1 steps".
#  - zb-auto with 1 micro-batch for 2 stages: the bubble line says that the pipeline never fills
#    and how many micro-batches fill it.
#  - placement.policy=auto: the step-0 validation is logged as step 0 (its first step runs
#    before the line is printed).
set -uo pipefail
mpiexec=$1 tide=$2 src=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fails=0
bad() { echo "FAILED: $*"; fails=$((fails + 1)); }
# ok MESSAGE: printed when the section that began at `f0=$fails` found nothing wrong.
ok() { [ "$fails" -eq "$f0" ] && echo "ok: $*"; }
"$tide" prepare --input "$src/README.md" "$src/docs" --out-dir data --vocab-size 300 \
  > prepare.log 2>&1 || { cat prepare.log; echo "FAILED: tide prepare"; exit 1; }
common=(data.dir=data model.n_layer=1 model.n_head=2 model.n_embd=16 seq_len=16 threads=1
  train_micro_batch_size_per_gpu=2 eval.interval=0 eval.sequences=2 log.interval=1 train_steps=4)
mpi=("$mpiexec" --oversubscribe --allow-run-as-root)
# Lines "step N/4 | loss ..." of a log, after a terminal's "\r\n" line ends became "\n".
progress_lines() { sed 's/\r$//' "$1" | grep -c '^step \+[0-9]\+/4 | loss'; }
# '\r' left once the terminal's line ends are removed: a line rewritten in place.
bare_cr() { sed 's/\r$//' "$1" | grep -c $'\r'; }

f0=$fails
# 1. mpirun, stdout a file.
timeout 300 "${mpi[@]}" -np 2 "$tide" train "${common[@]}" out_dir=a > a.log 2> a.err \
  || { cat a.log a.err; bad "2-rank run to a file"; }
[ "$(bare_cr a.log)" -eq 0 ] || bad "mpirun > file: '\\r' in the log"
[ "$(progress_lines a.log)" -eq 4 ] || { cat -A a.log; bad "mpirun > file: not one line per step"; }
ok "mpirun > file: $(wc -l < a.log) lines, 4 progress lines, no '\\r'"

f0=$fails
# 2. mpirun on a terminal: the ranks' stdout is a pty either way; here mpirun's is one too.
timeout 300 script -qefc "${mpi[*]} -np 2 $tide train ${common[*]} out_dir=b" /dev/null \
  < /dev/null > b.log 2>&1 || { cat b.log; bad "2-rank run under script"; }
[ "$(bare_cr b.log)" -eq 0 ] || bad "mpirun on a terminal: '\\r' in the output"
[ "$(progress_lines b.log)" -eq 4 ] || { cat -A b.log; bad "mpirun on a terminal: not one line per step"; }
ok "mpirun on a terminal: 4 progress lines, no '\\r'"

f0=$fails
# 3. One process on a terminal: in place, and the final lines on lines of their own.
timeout 300 script -qefc "$tide train ${common[*]} train_steps=1 out_dir=c" /dev/null \
  < /dev/null > c.log 2>&1 || { cat c.log; bad "1-process run under script"; }
[ "$(bare_cr c.log)" -ge 1 ] || { cat -A c.log; bad "one process on a terminal: no in-place progress line"; }
sed 's/\r$//' c.log | grep '^tide: trained 1 step in' > /dev/null \
  || { cat -A c.log; bad "one process on a terminal: 'tide: trained 1 step' does not start a line"; }
ok "one process on a terminal: progress rewritten in place, 'trained 1 step' on its own line"

f0=$fails
# 4. An error every rank hits in training (placement auto with a limit below the activations):
#    one copy, no blank line.
timeout 300 "${mpi[@]}" -np 2 "$tide" train "${common[@]}" placement.policy=auto \
  placement.device_memory_limit=40960 out_dir=d > d.log 2> d.err
rc=$?
[ $rc -ne 0 ] || bad "the failing run exited 0"
n=$(grep -c 'placement.device_memory_limit (' d.err)
[ "$n" -eq 1 ] || { cat d.err; bad "the error is printed $n times"; }
# (mpirun's own notes have blank lines; tide's lines must not come after one.)
! grep -B1 '^rank [0-9]*: \|^tide: ' d.err | grep '^$' > /dev/null || { cat -A d.err; bad "a blank line before tide's error"; }
ok "an error on every rank: one copy: $(grep 'device_memory_limit (' d.err | cut -c1-120)..."

f0=$fails
# 5. zb-auto at accumulation 1 over 2 stages: the hint.
timeout 300 "${mpi[@]}" -np 2 "$tide" train "${common[@]}" model.n_layer=2 pipeline.stages=2 \
  pipeline.schedule=zb-auto train_steps=2 out_dir=e > e.log 2>&1 || { cat e.log; bad "zb-auto run"; }
grep -q 'only 1 micro-batch per step for 2 stages, so the pipeline never fills: it needs at least 2 (gradient_accumulation_steps=2 simulates a bubble of [0-9.]*%' e.log \
  || { cat e.log; bad "zb-auto at 1 micro-batch: no hint"; }
ok "$(grep -o 'simulated bubble.*' e.log)"

f0=$fails
# 6. placement.policy=auto runs its first step before the step-0 validation is logged: the
#    validation is still step 0's, in the log and in metrics.jsonl.
timeout 300 "$tide" train "${common[@]}" train_steps=1 placement.policy=auto \
  placement.device_memory_limit=100000000 out_dir=f > f.log 2>&1 || { cat f.log; bad "auto run"; }
grep -q '^step \+0 | val loss' f.log || { cat f.log; bad "auto: no step 0 validation line"; }
grep -m1 '"val_loss"' f/metrics.jsonl | grep -q '"step":0,' \
  || { cat f/metrics.jsonl; bad "auto: the first val_loss record is not step 0's"; }
ok "auto placement: step 0's validation logged as step 0"
[ "$fails" -eq 0 ]
