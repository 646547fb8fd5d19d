#!/usr/bin/env bash
# Installs tide's dependencies (Debian packages; run as root) and builds tide into ./build.
# Used by the README's first command and by CI.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config
          libopenblas-dev libopenmpi-dev openmpi-bin
          libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev libfmt-dev libxxhash-dev
          zlib1g-dev libpcre2-dev
          fortunes)
bash scripts/install_missing.sh "${packages[@]}"

# CUDA sources are compiled when nvcc exists (under /usr/local/cuda on GPU images).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
