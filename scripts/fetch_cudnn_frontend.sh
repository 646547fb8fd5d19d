#!/usr/bin/env bash
# The cudnn-frontend C++ headers (NVIDIA's header-only graph API over cuDNN 9) for the CUDA
# module's fused attention (src/tide/kernels/cuda/attention_cudnn.cpp): PyPI's
# nvidia-cudnn-frontend wheel ships them under include/. Downloads the pinned wheel (any
# platform's: the headers are the same) and unpacks include/ into third_party/cudnn_frontend/
# (git-ignored); nothing when they are there already. scripts/setup.sh calls it where CUDA is
# compiled; CMake compiles the fused attention when the headers are there (without them, the
# attention op keeps tide's own CUDA kernels and CMake says so).
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.32.0
dest=third_party/cudnn_frontend
if [ -f "$dest/include/cudnn_frontend.h" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
python3 -m pip --version >/dev/null 2>&1 || bash scripts/install_missing.sh python3-pip
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.11 --platform manylinux_2_28_x86_64 \
  "nvidia-cudnn-frontend==$version" -d "$tmp"
rm -rf "$dest"
mkdir -p "$dest"
python3 - "$tmp" "$dest" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1:]
wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.startswith("include/")]
    z.extractall(dest, members)
print(f"fetch_cudnn_frontend: {len(members)} headers from {os.path.basename(wheel)} in {dest}/include")
PY
echo "$version" >"$dest/VERSION"
