#!/usr/bin/env python3
"""Joins the GPU table's JSON lines into one markdown table (issue 40).

usage: bench/run_gpu.py FILE... [--peak-f32 TFLOPS] [--peak-16 TFLOPS]

Each FILE holds one JSON object per line, from build/bench/gpu_steps (kiln),
bench/peers/gpu_peers.py --impl torch|jax, and build/bench/ops_bench (kiln's
embedding gradient and sort); other lines are ignored. Rows are joined by
(case, dtype, n); each implementation's median ms is shown with kiln's ratio to
each peer (kiln / peer: above 1 is slower), and for matmul kiln's TFLOP/s and
its fraction of the card's peak (--peak-f32 / --peak-16, datasheet dense
figures; defaults are the H100/H200 SXM's 67 and 989). scripts/gpu/device_run.sh
runs it on the device machine.
"""
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("files", nargs="+")
ap.add_argument("--peak-f32", type=float, default=67.0)
ap.add_argument("--peak-16", type=float, default=989.0)
args = ap.parse_args()

rows = {}    # (case, dtype, n) -> {impl: record}
errors = []
envs = []
order = []
for path in args.files:
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        errors.append(f"{path}: {e}")
        continue
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except ValueError:
            continue
        case = r.get("case")
        if case == "env":
            envs.append(r)
            continue
        impl = r.get("impl")
        if impl is None:  # ops_bench's lines name a variant
            v = r.get("variant")
            impl = {"scatter_add": "kiln", "kiln": "kiln"}.get(v)
            if impl is None:
                continue
        if "error" in r:
            errors.append(f"{case} {r.get('dtype', '')} {r.get('n', '')} ({impl}): {r['error']}")
            continue
        key = (case, r.get("dtype", "f32"), r.get("n") if case == "matmul" else None)
        if key not in rows:
            rows[key] = {}
            order.append(key)
        rows[key][impl] = r

for e in envs:
    print("- " + ", ".join(f"{k}: {v}" for k, v in e.items() if k != "case"))
print()


def ms(r):
    return None if r is None else r.get("ms")


def fmt(x, d=3):
    return "" if x is None else f"{x:.{d}f}"


def ratio(a, b):
    return "" if a is None or b is None or b == 0 else f"{a / b:.2f}"


print("| case | dtype | n | kiln Vulkan ms | PyTorch CUDA ms | JAX CUDA ms | kiln/PyTorch "
      "| kiln/JAX | kiln TFLOP/s | PyTorch TFLOP/s | kiln % of peak |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for key in order:
    case, dtype, n = key
    r = rows[key]
    k, t, j = ms(r.get("kiln")), ms(r.get("torch")), ms(r.get("jax"))
    tf = tt = pk = ""
    if case == "matmul" and n:
        flop = 2.0 * n ** 3
        peak = args.peak_f32 if dtype == "f32" else args.peak_16
        if k:
            tf = fmt(flop / (k * 1e9), 1)
            pk = f"{100 * flop / (k * 1e9) / peak:.1f}"
        if t:
            tt = fmt(flop / (t * 1e9), 1)
    print(f"| {case} | {dtype} | {'' if n is None else n} | {fmt(k)} | {fmt(t)} | {fmt(j)} "
          f"| {ratio(k, t)} | {ratio(k, j)} | {tf} | {tt} | {pk} |")
if errors:
    print("\nerrors:")
    for e in errors:
        print("- " + e)
