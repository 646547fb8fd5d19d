#!/bin/sh
# expect_watchdog.sh MPIEXEC PROGRAM [device]: runs PROGRAM (watchdog_group) on 3 ranks and
# checks that the watchdog ends the job within 30 seconds with the one line that names the call
# and the ranks that did not arrive:
#   (no mode) the peer of a sub-group's recv by world rank (group rank in brackets) and world
#             rank 2 as missing;
#   device    an all-reduce on the simulated device's collectives, watched by the device call
#             watchdog, not by a host wait.
mpiexec="$1"; prog="$2"; mode="${3:-}"
out=$(timeout 30 "$mpiexec" -np 3 --oversubscribe --allow-run-as-root "$prog" $mode 2>&1)
rc=$?
echo "$out"
if [ "$rc" -eq 124 ]; then echo "FAIL: the job hung (killed after 30 s)"; exit 1; fi
if [ "$rc" -eq 0 ]; then echo "FAIL: the job exited 0 although a call timed out"; exit 1; fi
if [ "$mode" = device ]; then
  want="tide: error: communication timed out: rank 0 waited 2 s (comm.timeout_s = 2) in all_reduce of 64 B on sim:0; ranks 1, 2 did not arrive (stopped, dead, or busy elsewhere)"
else
  want="tide: error: communication timed out: rank 0 waited 2 s (comm.timeout_s = 2) in recv of 64 B from rank 2 (rank 1 of a group of 2) (tag 3); ranks 1, 2 did not arrive (stopped, dead, or busy elsewhere)"
fi
if ! printf '%s\n' "$out" | grep -qxF "$want"; then
  echo "FAIL: expected the line: $want"; exit 1
fi
echo "OK: exit code $rc, the line names the call and the missing ranks"
