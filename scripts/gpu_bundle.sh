#!/usr/bin/env bash
# Packs the GPU test programs for a machine that has a GPU but not tide's Debian libraries
# (the project's lent H100/H200 machines: CUDA 13, no OpenBLAS/OpenMPI/fmt, no network):
#   scripts/gpu_bundle.sh            builds test_gpu_* and libtide_cuda.so (the CUDA module the
#                                    programs dlopen from their own folder, core/cuda_module.h)
#                                    in ./build (nvcc must be here) and copies them, with every
#                                    non-CUDA, non-libc library they load, into .gpu/ and its
#                                    archive .gpu.tar.gz (git-ignored; what a run call carries)
# then on the GPU machine, from the repository root (.gpu.tar.gz carried along):
#   tar xzf .gpu.tar.gz && cd .gpu && LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64 ./run_gpu_tests.sh
# and the op benchmark beside its PyTorch peer (bench/gpu/ops.cpp, JSON lines):
#   ./bench_gpu_ops && python3 ops_torch.py
# The CUDA runtime, cuBLAS and NCCL come from the GPU machine (same major version as here).
# The programs are built with -march=native: build on a CPU no newer than the GPU machine's.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bundle_common.sh
tests=(test_gpu_kernels test_gpu_optim test_gpu_comm test_gpu_tensor_parallel)
# The CUDA sources: compiled here although this machine has no GPU (with the cudnn-frontend
# headers of the fused attention, as setup.sh fetches them).
bash scripts/fetch_cudnn_frontend.sh
cmake -S . -B build -DTIDE_WITH_CUDA=ON >/dev/null
cmake --build build -j "$(nproc)" --target "${tests[@]}" tide_cuda bench_gpu_ops
rm -rf .gpu && mkdir -p .gpu/lib
for t in "${tests[@]}"; do cp "$(find build/tests/gpu -name "$t" -type f -executable)" .gpu/; done
cp build/libtide_cuda.so build/bench/bench_gpu_ops bench/gpu/ops_torch.py .gpu/
ldd .gpu/test_gpu_* .gpu/bench_gpu_ops .gpu/libtide_cuda.so | awk '/=>/ {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so|cuda|nccl' |
  xargs -I{} cp -L {} .gpu/lib/
cat > .gpu/run_gpu_tests.sh <<RUN
#!/usr/bin/env bash
# Runs every bundled GPU test program three times (GPU results must repeat bitwise).
rc=0
for t in ${tests[*]}; do
  echo "=== \$t"
  ./\$t --gtest_color=no --gtest_repeat=3 || rc=1
done
exit \$rc
RUN
chmod +x .gpu/run_gpu_tests.sh
pack_bundle .gpu
