#!/usr/bin/env bash
# The CUDA libraries are loaded on demand (src/tide/core/cuda_module.h): the tide program does
# not link cudart, cuBLAS(Lt), NCCL or cuDNN, directly or through another library, and a CPU
# command loads none of them (nor libtide_cuda.so); the module that does is built beside tide
# and exports only its entry points. Skipped (77) in builds without CUDA.
set -uo pipefail
tide=$1 have_cuda=$2 dir=$3
if [ "$have_cuda" != "ON" ]; then
  echo "skipped: this build has no CUDA"
  exit 77
fi
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
fail=0
cuda_libs='lib(cuda|cudart|cublas|cublasLt|nccl|cudnn)[.]so|libtide_cuda[.]so'

readelf -d "$tide" | grep NEEDED > needed.txt
if grep -Ei "$cuda_libs" needed.txt; then
  echo "FAILED: tide links the CUDA libraries again (readelf -d: NEEDED above)"
  fail=1
fi
ldd "$tide" > ldd.txt
if grep -Ei "$cuda_libs" ldd.txt; then
  echo "FAILED: tide loads the CUDA libraries at start (ldd above)"
  fail=1
fi
# What the dynamic linker opens while CPU commands run, dlopen included.
LD_DEBUG=libs "$tide" --version > /dev/null 2> version.libs || { echo "FAILED: tide --version"; fail=1; }
LD_DEBUG=libs "$tide" estimate --model gpt2-124m --world-size 4 --gpu-mem 16GiB --host-mem 64GiB \
  > /dev/null 2> estimate.libs || { echo "FAILED: tide estimate"; fail=1; }
for f in version.libs estimate.libs; do
  if grep -E "calling init: .*($cuda_libs)" "$f"; then
    echo "FAILED: a CPU command (${f%.libs}) loaded a CUDA library (LD_DEBUG=libs above)"
    fail=1
  fi
done
module="$(dirname "$tide")/libtide_cuda.so"
if [ ! -f "$module" ]; then
  echo "FAILED: no CUDA module beside tide: $module"
  fail=1
else
  # Into a file first: `ldd | grep -q` under pipefail fails when grep quits before ldd's last
  # line (SIGPIPE), as it did once in CI.
  ldd "$module" > module_ldd.txt
  grep -q 'libcublas[.]so' module_ldd.txt || { echo "FAILED: the module does not link cuBLAS"; fail=1; }
  # Exported: the tide_cuda_<floor> entry points, none of tide's C++ functions (all hidden).
  nm -D --defined-only "$module" > exports.txt
  grep -q ' T tide_cuda_kernels$' exports.txt || { echo "FAILED: no tide_cuda_kernels entry"; fail=1; }
  if grep -E ' _ZN4tide' exports.txt; then
    echo "FAILED: the module exports tide functions (above); only the entry points should be"
    fail=1
  fi
fi
[ $fail = 0 ] && echo "ok: tide does not link or load the CUDA libraries; libtide_cuda.so does"
exit $fail
