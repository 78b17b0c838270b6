"""Shared by the JAX peer scripts: platform selection, timing, JSON output.

Each script takes --platform cpu|gpu (JAX_PLATFORMS is set before jax is
imported, so a machine with jax[cuda] still runs the CPU rows on the CPU) and
prints one JSON object on stdout. bench/peers.py runs them in the venv that
bench/setup.sh creates.
"""
import argparse
import json
import os
import sys
import time


def parse_args(add_arguments=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--platform", choices=["cpu", "gpu"], default="cpu")
    if add_arguments:
        add_arguments(ap)
    args = ap.parse_args()
    if args.platform == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    else:  # JAX's default: its GPU backend (CUDA or ROCm plugin) when one is installed
        os.environ.pop("JAX_PLATFORMS", None)
    global _platform
    _platform = args.platform
    return args


_platform = "cpu"


def describe(jax):
    """The device the script runs on; exits if --platform gpu found no GPU."""
    d = jax.devices()[0]
    if _platform == "gpu" and d.platform == "cpu":
        sys.exit("--platform gpu: this jax has no GPU backend (install jax[cuda12])")
    return {"jax": jax.__version__, "platform": d.platform,
            "device": getattr(d, "device_kind", str(d)), "cpus": os.cpu_count()}


def per_call_seconds(call, finish, min_time=0.5):
    """Mean seconds per call of `call()` over a loop of at least min_time seconds
    (the iteration count doubles until it does, as Google Benchmark's does);
    finish() runs once after the loop, inside the timing (a block_until_ready)."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            out = call()
        finish(out)
        dt = time.perf_counter() - t0
        if dt >= min_time or n >= 1 << 24:
            return dt / n, n
        n = int(n * min(10.0, max(2.0, 1.4 * min_time / max(dt, 1e-9))))


def emit(obj):
    json.dump(obj, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
