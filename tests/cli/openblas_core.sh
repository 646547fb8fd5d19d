#!/usr/bin/env bash
# tide runs OpenBLAS's vector kernels where the library's own detection fell back to the
# generic "Prescott" ones (kernels/cpu/openblas_core.h): on a CPU with AVX2 and FMA the core
# the running tide loaded (OpenBLAS prints it with OPENBLAS_VERBOSE=2, once per program start)
# is not Prescott; a core the user sets is kept. Skipped (77) on CPUs without AVX2/FMA.
set -uo pipefail
tide=$1
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo || { echo "no AVX2/FMA: skipped"; exit 77; }
last_core() { grep '^Core: ' | tail -1 | cut -d' ' -f2; }
core=$(OPENBLAS_VERBOSE=2 "$tide" --version 2>&1 | last_core)
echo "OpenBLAS core of the running tide: $core"
[ -n "$core" ] || { echo "FAILED: OpenBLAS did not name its core"; exit 1; }
[ "$core" != Prescott ] || { echo "FAILED: tide runs the generic kernels on an AVX2 CPU"; exit 1; }
kept=$(OPENBLAS_VERBOSE=2 OPENBLAS_CORETYPE=Haswell "$tide" --version 2>&1 | last_core)
echo "with OPENBLAS_CORETYPE=Haswell: $kept"
[ "$kept" = Haswell ] || { echo "FAILED: the user's OPENBLAS_CORETYPE was not kept"; exit 1; }
starts=$(OPENBLAS_VERBOSE=2 "$tide" --version 2>&1 | grep -c '^Core: ')
echo "program starts: $starts"
[ "$starts" -le 2 ] || { echo "FAILED: tide re-executed itself more than once"; exit 1; }
echo PASSED
