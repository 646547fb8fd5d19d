#!/bin/sh
# expect_abort.sh MPIEXEC NP PROGRAM: runs PROGRAM (rank_throws) on NP ranks and checks that the
# whole job fails (non-zero exit), within 30 seconds (no hang), with rank 1's message.
mpiexec="$1"; np="$2"; prog="$3"
out=$(timeout 30 "$mpiexec" -np "$np" --oversubscribe --allow-run-as-root "$prog" 2>&1)
rc=$?
echo "$out"
if [ "$rc" -eq 124 ]; then echo "FAIL: the job hung (killed after 30 s)"; exit 1; fi
if [ "$rc" -eq 0 ]; then echo "FAIL: the job exited 0 although rank 1 threw"; exit 1; fi
case "$out" in
  *"rank 1: deliberate failure on rank 1; this message must reach the user"*) ;;
  *) echo "FAIL: rank 1's message is missing from the output"; exit 1 ;;
esac
echo "OK: exit code $rc with rank 1's message"
