#!/usr/bin/env python3
"""bench/ops_bench (kiln, on each device asked for) and bench/peers/jax_ops.py
(JAX and numpy) in one run, as one markdown table with ratios.

usage: bench/run_ops.py [build dir] [--devices cpu,vulkan] [--python VENV_PYTHON]
                        [--platform cpu|gpu] [--repetitions N]
The JAX peers need the venv of bench/setup.sh (default ~/.cache/kiln-bench/venv).
"""
import argparse
import json
import os
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--devices", default="cpu,vulkan")
ap.add_argument("--python", default=os.path.expanduser("~/.cache/kiln-bench/venv/bin/python"))
ap.add_argument("--platform", default="cpu")
ap.add_argument("--repetitions", type=int, default=5)
args = ap.parse_args()

rows = []
for dev in args.devices.split(","):
    env = dict(os.environ, KILN_DEVICE=dev)
    out = subprocess.run([f"{args.build}/bench/ops_bench", "--reps", str(args.repetitions)],
                         env=env, check=True, capture_output=True, text=True).stdout
    rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
here = os.path.dirname(os.path.abspath(__file__))
if os.path.exists(args.python):
    out = subprocess.run([args.python, os.path.join(here, "peers", "jax_ops.py"),
                          "--platform", args.platform, "--repetitions", str(args.repetitions)],
                         check=True, capture_output=True, text=True).stdout
    rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
else:
    print(f"(no JAX venv at {args.python}: run bench/setup.sh for the peer rows)", file=sys.stderr)


def peer(case, variant):
    return next((r for r in rows if r["case"] == case and r["variant"] == variant), None)


print(f"median of {args.repetitions} calls after a warm-up; ratio = kiln / peer (lower is better)")
print("| case | variant | device | ms | peak MiB | / jax | / numpy |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    dev = r.get("device", r.get("platform", "host"))
    if "error" in r:
        print(f"| {r['case']} | {r['variant']} | {dev} | fails: {r['error'][:90]} | | | |")
        continue
    peak = f"{r['peak_bytes'] / 2**20:,.0f}" if "peak_bytes" in r else ""
    j, n = peer(r["case"], "jax"), peer(r["case"], "numpy")
    rj = f"{r['ms'] / j['ms']:.2f}" if j and r["variant"] not in ("jax", "numpy") else ""
    rn = f"{r['ms'] / n['ms']:.2f}" if n and r["variant"] not in ("jax", "numpy") else ""
    print(f"| {r['case']} | {r['variant']} | {dev} | {r['ms']:,.2f} | {peak} | {rj} | {rn} |")
