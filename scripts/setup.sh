#!/usr/bin/env bash
# The README's first command (with `&& build/tide`): installs tide's Debian packages (only the
# missing ones; run as root), builds the `tide` program into ./build and links
# /usr/local/bin/tide to it, so the docs' `tide ...` commands run as printed.
#
# Only what the first run needs is built: `tide` (and, where CUDA is compiled, the CUDA module
# it loads). The tests, benchmarks and fuzz targets are built by scripts/test.sh.
#   TIDE_CUDA=1  compile the CUDA sources (nvcc required; CI sets it so CUDA code never rots)
#   TIDE_CUDA=0  never compile them
#   (unset)      compile them when nvcc is found and a GPU is visible
# Used by the README's first command and by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config ccache
          libopenblas-dev libopenmpi-dev openmpi-bin
          libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev libfmt-dev libxxhash-dev
          zlib1g-dev libpcre2-dev libutf8proc-dev
          fortunes)
start=$SECONDS
bash scripts/install_missing.sh "${packages[@]}"
packages_s=$((SECONDS - start))

case "${TIDE_CUDA:-}" in
  1) cuda=ON ;;
  0) cuda=OFF ;;
  "") cuda=AUTO ;;
  *) echo "setup.sh: TIDE_CUDA='${TIDE_CUDA}': use 1 (compile the CUDA sources), 0 (never) or" \
          "leave it unset (when a GPU is visible)" >&2
     exit 2 ;;
esac
# The cudnn-frontend headers for the CUDA module's fused attention (PyPI; without them the
# module is built without it, and CMake says so).
if [ "$cuda" != OFF ] && { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  bash scripts/fetch_cudnn_frontend.sh ||
    echo "setup.sh: could not fetch the cudnn-frontend headers; building without cuDNN attention"
fi
# ccache: a second build of the same sources (another checkout, a branch switched back, CI with
# a kept cache) compiles nothing again; on a first build it costs about nothing.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_WITH_CUDA="$cuda" \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build build -j "$(nproc)" --target tide
echo "setup.sh: packages ${packages_s} s, configure and build $((SECONDS - start - packages_s)) s"

# `tide` on PATH: a link to this build, so a later rebuild is picked up. An existing
# /usr/local/bin/tide that is not a link is left alone.
link=/usr/local/bin/tide
if [ -L "$link" ] || [ ! -e "$link" ]; then
  if ln -sfn "$PWD/build/tide" "$link" 2>/dev/null; then
    echo "setup.sh: $link -> $PWD/build/tide"
  else
    echo "setup.sh: cannot write $link (not root?); run tide as build/tide or add $PWD/build to PATH"
  fi
else
  echo "setup.sh: $link exists and is not a link; left alone (this build is $PWD/build/tide)"
fi
