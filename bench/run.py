#!/usr/bin/env python3
"""Runs bench_eager several times and prints one table of medians and ratios.

usage: bench/run.py [build dir] [--repetitions N]
Peers are measured in the same process run (LibTorch when compiled in). Times are
medians over repetitions; ratios are kiln / peer (lower is better for times,
higher is better for GB/s against the memcpy limit).
"""
import argparse
import json
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--repetitions", type=int, default=7)
args = ap.parse_args()

out = subprocess.run(
    [f"{args.build}/bench/bench_eager", f"--benchmark_repetitions={args.repetitions}",
     "--benchmark_report_aggregates_only=true", "--benchmark_format=json",
     "--benchmark_min_time=0.2"],
    check=True, capture_output=True, text=True).stdout
rows = {}
for b in json.loads(out)["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    name = b["run_name"]
    rows[name] = b

def ns(name):
    b = rows.get(name)
    if not b:
        return None
    scale = {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
    return b["real_time"] * scale

def gbs(name):
    b = rows.get(name)
    return b["bytes_per_second"] / 1e9 if b else None

def fmt(x, unit):
    return "n/a" if x is None else f"{x:,.1f} {unit}"

def ratio(a, b):
    return "n/a" if a is None or b is None else f"{a / b:.2f}"

print(f"median of {args.repetitions} repetitions; peer = LibTorch (Debian 1.13, "
      "its default intra-op threads)")
print(f"| case | kiln | peer | kiln/peer | limit (memcpy) | kiln/limit |")
print(f"|---|---|---|---|---|---|")
print(f"| add, two 1-element f32 arrays (dispatch) | {fmt(ns('BM_kiln_add_1elem'), 'ns')} "
      f"| {fmt(ns('BM_torch_add_1elem'), 'ns')} "
      f"| {ratio(ns('BM_kiln_add_1elem'), ns('BM_torch_add_1elem'))} | | |")
print(f"| flatten 100-leaf model / torch parameters() | "
      f"{fmt(ns('BM_kiln_flatten_100_leaves'), 'ns')} "
      f"| {fmt(ns('BM_torch_parameters_100_leaves'), 'ns')} "
      f"| {ratio(ns('BM_kiln_flatten_100_leaves'), ns('BM_torch_parameters_100_leaves'))} | | |")
for n, label in ((1 << 16, "64K"), (1 << 24, "16M")):
    k = gbs(f"BM_kiln_add_f32/{n}/real_time")
    t = gbs(f"BM_torch_add_f32/{n}/real_time")
    m = gbs(f"BM_memcpy/{n}/real_time")
    print(f"| add f32 x {label} elements (GB/s moved) | {fmt(k, 'GB/s')} | {fmt(t, 'GB/s')} "
          f"| {ratio(k, t)} | {fmt(m, 'GB/s')} | {ratio(k, m)} |")
