#!/usr/bin/env bash
# Installs tide's dependencies (Debian packages; run as root) and builds tide into ./build.
# Used by the README's first command and by CI.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config
          libopenblas-dev libopenmpi-dev openmpi-bin
          libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev libfmt-dev libxxhash-dev
          fortunes)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi

# CUDA sources are compiled when nvcc exists (under /usr/local/cuda on GPU images).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
