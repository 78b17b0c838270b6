#!/usr/bin/env python3
"""Writes tests/golden/weights.safetensors (with the safetensors library's
numpy API) and tests/golden/weights.npz (numpy.savez): weight files from
outside kiln, which tests/test_weights.cpp reads and checks value for value.

  python3 -m venv /tmp/env && /tmp/env/bin/pip install numpy safetensors
  /tmp/env/bin/python tests/golden/make_weights_golden.py

Every tensor is arange-based (value i at flat index i, scaled as below), so the
C++ test knows the values without a copy of them.
"""
import pathlib

import numpy as np
from safetensors.numpy import save_file

here = pathlib.Path(__file__).parent
tensors = {
    "fc1.weight": (np.arange(12, dtype=np.float32) * 0.25).reshape(3, 4),   # i * 0.25
    "fc1.bias": np.arange(3, dtype=np.float16) - 1,                          # i - 1
    "fc2.weight": (np.arange(6, dtype=np.float64) / 8).reshape(2, 3),       # i / 8
    "steps": np.arange(4, dtype=np.int32) * 3,                               # 3 i
    "mask": np.array([True, False, True]),
    "position_ids": np.arange(5, dtype=np.int64),                            # not a kiln dtype
}
save_file(tensors, here / "weights.safetensors", metadata={"format": "np", "source": "kiln-test"})
np.savez(here / "weights.npz", **tensors)
print("wrote", here / "weights.safetensors", "and", here / "weights.npz")
