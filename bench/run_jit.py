#!/usr/bin/env python3
"""Runs bench_jit several times and prints one table of medians and ratios.

usage: bench/run_jit.py [build dir] [--repetitions N]
The device is KILN_DEVICE's (default: the best device). The LibTorch peer runs in
the same process when compiled in (bench/setup.sh installs it). Times are medians
over repetitions; ratios are kiln / peer (lower is better).
"""
import argparse
import json
import os
import subprocess

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--repetitions", type=int, default=5)
args = ap.parse_args()

out = subprocess.run(
    [f"{args.build}/bench/bench_jit", f"--benchmark_repetitions={args.repetitions}",
     "--benchmark_report_aggregates_only=true", "--benchmark_format=json",
     "--benchmark_min_time=0.5"],
    check=True, capture_output=True, text=True).stdout
rows = {b["run_name"]: b for b in json.loads(out)["benchmarks"]
        if b.get("aggregate_name") == "median"}


def ns(name):
    b = rows.get(name)
    if not b:
        return None
    return b["real_time"] * {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]


def counter(name, key):
    b = rows.get(name)
    return None if not b or key not in b else b[key]


def fmt(x, unit, scale=1.0):
    return "n/a" if x is None else f"{x / scale:,.2f} {unit}"


def ratio(a, b):
    return "n/a" if a is None or b is None else f"{a / b:.2f}"


device = os.environ.get("KILN_DEVICE", "default")
print(f"device: {device}; median of {args.repetitions} repetitions; peer = LibTorch 1.13 "
      "(Debian, OpenBLAS, eager)")
print()
print("| cache hit, no work | kiln | per leaf |")
print("|---|---|---|")
h10, h100, h1000 = (ns(f"BM_kiln_jit_hit/{n}") for n in (10, 100, 1000))
per_leaf = None if h10 is None or h1000 is None else (h1000 - h10) / 990
for n, h in ((10, h10), (100, h100), (1000, h1000)):
    print(f"| {n} leaves | {fmt(h, 'us', 1e3)} | |")
print(f"| slope | | {fmt(per_leaf, 'ns')} |")
print(f"| (flatten alone, 100 leaves) | {fmt(ns('BM_kiln_flatten/100'), 'us', 1e3)} | |")
print()
print("| MLP 64-256-256-10, batch 128, Adam step | time | launches | peak MiB | "
      "in place | kiln/LibTorch |")
print("|---|---|---|---|---|---|")
torch = ns("BM_torch_mlp_step/real_time")
for name, label in (("BM_kiln_mlp_step/real_time", "kiln filter_jit, fused"),
                    ("BM_kiln_mlp_step_unfused/real_time", "kiln filter_jit, KILN_FUSION=0")):
    t = ns(name)
    print(f"| {label} | {fmt(t, 'ms', 1e6)} | {counter(name, 'launches') or 'n/a'} | "
          f"{fmt(counter(name, 'peak_MiB'), '')} | {counter(name, 'in_place')} | "
          f"{ratio(t, torch)} |")
print(f"| LibTorch (forward, backward, Adam) | {fmt(torch, 'ms', 1e6)} | | | | 1.00 |")
cold = ns("BM_kiln_mlp_cold_compile/iterations:3/real_time")
print()
print(f"cold compile + first step (trace, optimize, fuse, kernels): {fmt(cold, 'ms', 1e6)}")
