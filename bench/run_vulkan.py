#!/usr/bin/env python3
"""Runs bench_vulkan several times and prints one table of medians and ratios.

usage: bench/run_vulkan.py [build dir] [--repetitions N]
Everything in the table is measured in the same run: Vulkan next to the CPU
backend and memcpy. Kernel compile latency is measured twice, in two processes
sharing a fresh disk cache: cold (empty cache) and warm (the second process finds
every kernel on disk). Run it with MESA_SHADER_CACHE_DISABLE=true as well as
without: lavapipe compiles at the first dispatch and has its own shader cache.
"""
import argparse
import json
import os
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--repetitions", type=int, default=5)
args = ap.parse_args()


def run(filter_, env=None, reps=args.repetitions):
    out = subprocess.run(
        [f"{args.build}/bench/bench_vulkan", f"--benchmark_repetitions={reps}",
         "--benchmark_report_aggregates_only=true", "--benchmark_format=json",
         "--benchmark_min_time=0.3", f"--benchmark_filter={filter_}"],
        check=True, capture_output=True, text=True, env=env).stdout
    # With one repetition Google Benchmark reports no aggregates: take the run.
    want = (lambda b: b.get("aggregate_name") == "median") if reps > 1 else (
        lambda b: b.get("run_type") == "iteration")
    return {b["run_name"]: b for b in json.loads(out)["benchmarks"] if want(b)}


rows = run("BM_(vk_add|cpu_add|memcpy|vk_submit|vk_matmul|cpu_matmul)")
with tempfile.TemporaryDirectory() as cache:
    env = dict(os.environ, KILN_CACHE_DIR=cache)
    cold = run("BM_vk_compile_kernel", env, reps=1)
    warm = run("BM_vk_compile_kernel", env, reps=1)


def us(rows, name):
    b = rows.get(name)
    if not b:
        return None
    return b["real_time"] * {"ns": 1e-3, "us": 1, "ms": 1e3}[b["time_unit"]]


def gbs(name):
    b = rows.get(name)
    return b["bytes_per_second"] / 1e9 if b else None


def gflops(name):
    b = rows.get(name)
    return b["GFLOPS"] / 1e9 if b else None


def fmt(x, unit):
    return "n/a" if x is None else f"{x:,.1f} {unit}"


def ratio(a, b):
    return "n/a" if a is None or b is None else f"{a / b:.2f}"


shader_cache = "off" if os.environ.get("MESA_SHADER_CACHE_DISABLE") == "true" else "on"
print(f"median of {args.repetitions} repetitions; Mesa shader cache {shader_cache}")
print("| case | vulkan | cpu backend | vulkan/cpu | limit | vulkan/limit |")
print("|---|---|---|---|---|---|")
for n, label in ((1 << 16, "64K"), (1 << 24, "16M")):
    v = gbs(f"BM_vk_add_f32/{n}/real_time")
    c = gbs(f"BM_cpu_add_f32/{n}/real_time")
    m = gbs(f"BM_memcpy/{n}/real_time")
    print(f"| add f32 x {label} + wait (GB/s moved) | {fmt(v, 'GB/s')} | {fmt(c, 'GB/s')} "
          f"| {ratio(v, c)} | memcpy {fmt(m, 'GB/s')} | {ratio(v, m)} |")
print(f"| submit + wait, one tiny dispatch | {fmt(us(rows, 'BM_vk_submit_wait/real_time'), 'us')} "
      "| | | | |")
v = gflops("BM_vk_matmul/1024/real_time")
c = gflops("BM_cpu_matmul/1024/real_time")
print(f"| matmul f32 1024^2 (GFLOP/s) | {fmt(v, 'GFLOP/s')} | {fmt(c, 'GFLOP/s')} "
      f"| {ratio(v, c)} | naive shader 2 GFLOP/s | {ratio(v, 2.0)} |")
print(f"| kernel compile + first dispatch, cold | "
      f"{fmt(us(cold, 'BM_vk_compile_kernel/iterations:40/real_time'), 'us')} | | | | |")
print(f"| kernel compile + first dispatch, warm disk cache | "
      f"{fmt(us(warm, 'BM_vk_compile_kernel/iterations:40/real_time'), 'us')} | | | target 1000 us | "
      f"{ratio(us(warm, 'BM_vk_compile_kernel/iterations:40/real_time'), 1000.0)} |")
