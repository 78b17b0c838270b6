"""Checks a kiln checkpoint with numpy (run by tests/test_checkpoint.cpp).

  read_npz.py check FILE    numpy.load reads FILE: every member is an array
                            (`for k in d.files: d[k].shape`, the manifest
                            too, without pickle); names, dtypes, shapes and
                            values are the ones the C++ test saved; the
                            manifest's text is bytes(d[MANIFEST]).decode().
  read_npz.py bf16 FILE     the member ["w"] of FILE is '<u2' words whose
                            values, widened as the README says, are 1, pi
                            (bf16's 3.140625), -2, NaN, 2^-133 and -inf.
  read_npz.py rewrite IN OUT  writes OUT with every .npy member re-encoded by
                            numpy itself (np.lib.format, deflated), keeping
                            kiln's manifest, so the C++ test can load numpy's
                            own headers.
Exits non-zero (with the reason on stderr) on any mismatch.
"""
import io
import sys
import zipfile

import numpy as np

MANIFEST = "__kiln_manifest__"


def check(path):
    f16_bits = np.array([0x3C00, 0xC000, 0x3555, 0x7C00], dtype="<u2")
    expected = {
        "layers[0].weight": np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
        "layers[1].weight": np.array([[1.5], [-2.0], [0.25]], dtype=np.float32),
        "layers[1].bias": np.array([0.5], dtype=np.float32),
        'buffers["count"]': np.array(7, dtype=np.int32),
        'buffers["key"]': np.array([0, 4294967295], dtype=np.uint32),
        'buffers["mask"]': np.array([True, False, True]),
        "half": f16_bits.view(np.float16),
        "precise": np.array([1.0 / 3.0, -1e300], dtype=np.float64),
    }
    with np.load(path) as d:
        # What a new user writes first: every member is an array.
        shapes = {k: d[k].shape for k in d.files}
        arrays = set(shapes) - {MANIFEST}
        if arrays != set(expected) or MANIFEST not in shapes:
            sys.exit(f"names: {sorted(shapes)} != {sorted(expected)} + {MANIFEST}")
        for name, want in expected.items():
            got = d[name]
            if got.dtype != want.dtype or got.shape != want.shape:
                sys.exit(f"{name}: {got.dtype}{got.shape} != {want.dtype}{want.shape}")
            if not np.array_equal(got, want):
                sys.exit(f"{name}: {got!r} != {want!r}")
        if d[MANIFEST].dtype != np.uint8 or d[MANIFEST].ndim != 1:
            sys.exit(f"manifest: {d[MANIFEST].dtype}{d[MANIFEST].shape}")
        manifest = bytes(d[MANIFEST]).decode()
    if not manifest.startswith("kiln-checkpoint\t1\n"):
        sys.exit(f"manifest starts {manifest[:40]!r}")
    if "none\t0\tlayers[0].bias\n" not in manifest:
        sys.exit("manifest does not record the None leaf layers[0].bias")
    print("numpy read", len(expected), "arrays")


def check_bf16(path):
    with np.load(path) as d:
        words = d['["w"]']
    if words.dtype != np.dtype("<u2") or words.shape != (6,):
        sys.exit(f"bf16 member: {words.dtype}{words.shape}")
    # The README's recipe without ml_dtypes: exact.
    values = (words.astype(np.uint32) << 16).view(np.float32)
    want = np.array([1.0, 3.140625, -2.0, np.nan, 2.0**-133, -np.inf], dtype=np.float32)
    if not np.array_equal(values, want, equal_nan=True):
        sys.exit(f"bf16 values: {values!r} != {want!r}")
    try:  # ml_dtypes (what JAX uses), where it is installed
        import ml_dtypes

        same = words.view(ml_dtypes.bfloat16).astype(np.float32)
        if not np.array_equal(same, want, equal_nan=True):
            sys.exit(f"ml_dtypes bfloat16 values: {same!r} != {want!r}")
    except ImportError:
        pass
    print("numpy read bf16", values)


def rewrite(src, dst):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(
        dst, "w", compression=zipfile.ZIP_DEFLATED
    ) as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name.endswith(".npy"):
                array = np.lib.format.read_array(io.BytesIO(data))
                out = io.BytesIO()
                np.lib.format.write_array(out, array)
                data = out.getvalue()
            zout.writestr(name, data)


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check(sys.argv[2])
    elif sys.argv[1] == "bf16":
        check_bf16(sys.argv[2])
    elif sys.argv[1] == "rewrite":
        rewrite(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
