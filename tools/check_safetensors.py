#!/usr/bin/env python3
"""Checks that Hugging Face's `safetensors` package reads files written by tide.

Why: tide writes checkpoints as safetensors so that they can be exchanged with HF; this script
is the outside witness that the files follow the spec (HF's own Rust parser validates the
header, the offsets and the buffer size) and that tide's checksum is what the docs say
(XXH3-64 of the header with the 16 checksum digits read as '0', then all tensor bytes).
Not run in CI (it needs pip packages):

    python3 -m venv /tmp/st && /tmp/st/bin/pip install safetensors numpy xxhash
    /tmp/st/bin/python tools/check_safetensors.py build/test_tmp/ckpt_*/*.ckpt runs/default/model.ckpt
"""
import json
import struct
import sys

import numpy as np
from safetensors import safe_open

PREFIX = b'{"__metadata__":{"checksum":"'
NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "U16": np.uint16}


def check(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = raw[8 : 8 + n], raw[8 + n :]
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    assert header.startswith(PREFIX), "the checksum is not the header's first field"

    with safe_open(path, framework="numpy") as f:  # HF's parser: validates header and offsets
        meta = f.metadata()
        assert meta["format"] == "tide", meta
        tide_meta = json.loads(meta["tide"])
        entries = json.loads(header)
        for name in f.keys():
            sl = f.get_slice(name)
            dtype, shape = sl.get_dtype(), sl.get_shape()
            assert dtype == entries[name]["dtype"] and shape == entries[name]["shape"], name
            begin, end = entries[name]["data_offsets"]
            if dtype in NUMPY_DTYPES:  # numpy has no bfloat16; those are checked by size only
                t = f.get_tensor(name)
                expected = np.frombuffer(data[begin:end], dtype=NUMPY_DTYPES[dtype]).reshape(shape)
                assert t.dtype == NUMPY_DTYPES[dtype] and np.array_equal(t, expected, equal_nan=True), name
            else:
                assert end - begin == int(np.prod(shape)) * 2, name

    try:
        import xxhash
    except ImportError:
        print(f"{path}: read by safetensors; checksum not checked (pip install xxhash)")
        return
    zeroed = header[: len(PREFIX)] + b"0" * 16 + header[len(PREFIX) + 16 :]
    computed = xxhash.xxh3_64_hexdigest(zeroed + data)
    assert computed == meta["checksum"], f"checksum {meta['checksum']}, computed {computed}"
    print(f"{path}: ok ({len(entries) - 1} tensors, checksum {computed}, "
          f"metadata keys {sorted(tide_meta) if isinstance(tide_meta, dict) else type(tide_meta)})")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        check(p)
