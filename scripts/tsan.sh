#!/usr/bin/env bash
# The simulated device's tests under ThreadSanitizer: scripts/tsan.sh [extra ctest arguments]
# Builds test_kernels, test_exec and mpi_train_sim_device into build-tsan (gcc, -fsanitize=thread,
# OpenMP pragmas off, CUDA off) and runs the tests labelled "sim": every op case on the simulated
# device, its streams, events and mover, the engine's training step on it (sim.engine), and
# 2 ranks training on it with every technique (mpi.train_sim_device.np2: ZeRO 0-3, offload,
# auto placement, pipeline stages, tensor parallelism; mpi.comm_device_routed.np2: the device
# collectives ordered after the compute stream by events alone). A host read of device memory before the wait that orders it is a data
# race between the stream's worker thread and the host, which TSan reports (and fails);
# sim.tsan_catches_missing_wait runs a test with its wait deliberately left out and passes
# only when TSan reports that race (docs/architecture.md, "The simulated device").
set -euo pipefail
cd "$(dirname "$0")/.."

cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_TSAN=ON >/dev/null
cmake --build build-tsan -j "${TSAN_BUILD_JOBS:-$(nproc)}" --target test_kernels test_exec mpi_train_sim_device \
  mpi_comm_device_routed
# OpenBLAS's own threads are not instrumented: one BLAS thread keeps its GEMMs on the caller.
export OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
ctest --test-dir build-tsan --output-on-failure -j 2 -L sim "$@"
