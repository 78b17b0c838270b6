#!/usr/bin/env python3
"""kiln next to its peers, in one run: one table of medians, ratios and targets.

    bench/setup.sh && python3 bench/peers.py build

bench/setup.sh installs the peers (LibTorch 1.13 from Debian, JAX + Equinox +
Optax from PyPI into a venv); the build directory needs -Dbench=true (bench_jit,
fused_chain, matmul_peak, cnn_step, and with LibTorch found at configure time
torch_fmnist_epoch, torch_char_transformer and torch_cnn_step) and the examples
(examples/train_fashion_mnist for case (c): its data comes with
scripts/bootstrap.sh; examples/char_transformer for case (f)).

Cases (each measured --repetitions times, interleaved: repetition i runs every
case once before repetition i+1 starts, so load from other jobs hits kiln and its
peers alike; the table gives medians, the median of the per-repetition ratios,
and the min-max ranges):
  a  jit cache-hit host overhead, 100-leaf model: kiln filter_jit (bench_jit
     BM_kiln_jit_hit/100) vs eqx.filter_jit and jax.jit (bench/peers/jax_hit.py)
  b  MLP 64-256-256-10, batch 128, Adam step: kiln CPU and Vulkan, LibTorch
     (bench_jit, same process as kiln CPU: each sample is the median of 3 runs of
     each, in random interleaved order), JAX + Optax (bench/peers/jax_mlp.py);
     also with OPENBLAS_CORETYPE=Haswell for kiln and LibTorch when the CPU has AVX2,
     and with OPENBLAS_CORETYPE=Prescott (OpenBLAS's SSE3 kernels, what it runs on
     a CPU model its table does not know) on x86-64: issue 20's target is kiln
     within 10% of its own default there
  c  one Fashion-MNIST epoch of the MLP example: kiln's example binary vs
     bench/peers/jax_fmnist_epoch.py (train time without compile; test accuracy)
     and LibTorch (bench/torch_fmnist_epoch.cpp); Prescott rows as in (b)
  d  cold compile of the step: a fresh process's first call, kiln with an empty
     KILN_CACHE_DIR (CPU; Vulkan with Mesa's shader cache empty, warm and off) vs
     jax.jit (bench/peers/jax_mlp.py --mode cold)
  e  fused elementwise chain (fused_chain's "arith": 15 ops, one broadcast row),
     1M and 16M f32: kiln (fused_chain --json) on CPU and Vulkan and jax.jit
     (bench/peers/jax_fused.py), in GB/s against host memcpy
  f  the character-level transformer of examples/char_transformer (2 pre-norm
     TransformerBlocks, d_model 64, 2 heads, RoPE, causal attention, GELU MLP,
     Adam 3e-3, batch 16 x context 32, 57-character vocabulary): training steps/s,
     the example binary on the CPU (--json's median step time over 200 steps, 100
     with --quick) vs the same model, optimizer and batch in LibTorch eager
     (bench/torch_char_transformer.cpp; its header lists the differences: eager
     execution, another PRNG stream, so other initial weights and batches from the
     same distributions); the final losses are printed as a check
  g  matmul 1024^3 f32 on kiln's CPU backend, 1 and 2 threads (kiln's pool and
     OpenBLAS's), in GFLOP/s against the FMA peak of as many cores measured in the
     same process (bench/matmul_peak.cpp: an AVX-512 or AVX2 FMA loop per thread,
     FLOPs per thread CPU second), and against cblas_sgemm called directly; also
     with OPENBLAS_CORETYPE=Prescott
  h  the small Fashion-MNIST CNN of bench/cnn_step (batch 128 of 1x28x28;
     Conv2d 1->32 3x3 pad 1 + bias, ReLU, max-pool 2/2, Conv2d 32->64 3x3 pad 1 +
     bias, ReLU, max-pool 2/2, flatten, Linear 3136->10; softmax cross entropy with
     integer labels, mean; one Adam step, lr 1e-3): median time per training step
     (forward + backward + update, each step timed up to its loss read on the host,
     20 steps after 3 warm-up steps, 10 with --quick) on the CPU, kiln's
     filter_jit'd step (cnn_step --jit --json) vs LibTorch eager
     (bench/torch_cnn_step.cpp, at::set_num_threads(kiln's pool size)) and
     eqx.filter_jit + Optax (bench/peers/jax_cnn_step.py); all three train on the
     same fixed batch, so the last step's losses are printed as a check (no target:
     reported only)

Targets are issue 20's: kiln/LibTorch <= 0.7 and kiln/JAX <= 0.8 in (b) and (c);
kiln with Prescott kernels <= 1.10x kiln's default; the fused chain >= 0.5x memcpy
and >= 1.0x XLA; the 2-thread matmul >= 0.70 of the 2-core peak. Each CPU row
names the code that ran, from kiln's DeviceInfo.driver ("kiln SIMD <level>; f32
GEMM <kiln's kernels or OpenBLAS>; <OpenBLAS config> (<core> kernels)", which
bench_jit and matmul_peak report).
A full default run (5 repetitions, every case) took 20 minutes on a 2-core
machine whose load average other builds kept at 5-10 (less when quiet; the run
prints its duration and slowest cases: lavapipe's cold compiles in (d) lead,
--no-vulkan skips the Vulkan rows); --quick 2-3 minutes.

Devices: kiln's CPU rows run with KILN_DEVICE=cpu, its Vulkan rows with
KILN_DEVICE=vulkan (lavapipe on a machine without a GPU). When the Vulkan device
is a GPU and the venv's jax has a GPU backend (jax[cuda12], not installed by
setup.sh), JAX runs on that GPU as well and the Vulkan rows are compared with it.

The markdown table goes to --out (default BUILD/peers.md), ready to paste into
docs/PERFORMANCE.md; every sample behind it to the same name with .json.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--repetitions", type=int, default=5)
ap.add_argument("--quick", action="store_true", help="one repetition, shorter loops")
ap.add_argument("--cases", default="abcdefgh", help="which cases to run (letters a-h)")
ap.add_argument("--out", help="markdown table path (default BUILD/peers.md)")
ap.add_argument("--venv", default=os.environ.get(
    "KILN_BENCH_VENV", os.path.expanduser("~/.cache/kiln-bench/venv")))
ap.add_argument("--no-haswell", action="store_true",
                help="skip the OPENBLAS_CORETYPE=Haswell rows")
ap.add_argument("--no-prescott", action="store_true",
                help="skip the OPENBLAS_CORETYPE=Prescott rows")
ap.add_argument("--no-vulkan", action="store_true", help="skip kiln's Vulkan rows")
ap.add_argument("--verbose", "-v", action="store_true", help="print each command")
ap.add_argument("--from-json", metavar="PATH",
                help="measure nothing: print the table of an earlier run's .json again")
args = ap.parse_args()
if args.quick:
    args.repetitions = 1
reps = args.repetitions
min_time = 0.2 if args.quick else 0.5
inner_reps = 1 if args.quick else 3  # bench_jit's kiln-vs-LibTorch runs, interleaved in-process
out_path = args.out or os.path.join(args.build, "peers.md")

bench_jit = os.path.join(args.build, "bench", "bench_jit")
fused_chain = os.path.join(args.build, "bench", "fused_chain")
# The training example: a binary in its own folder (examples/train_fashion_mnist/).
example = os.path.join(args.build, "examples", "train_fashion_mnist", "train_fashion_mnist")
if not os.path.isfile(example):
    example = os.path.join(args.build, "examples", "train_fashion_mnist")
torch_epoch = os.path.join(args.build, "bench", "torch_fmnist_epoch")
char_example = os.path.join(args.build, "examples", "char_transformer", "char_transformer")
torch_char = os.path.join(args.build, "bench", "torch_char_transformer")
matmul_peak = os.path.join(args.build, "bench", "matmul_peak")
CHAR_STEPS = 100 if args.quick else 200
cnn_step = os.path.join(args.build, "bench", "cnn_step")
torch_cnn = os.path.join(args.build, "bench", "torch_cnn_step")
CNN_STEPS = 10 if args.quick else 20
py = os.path.join(args.venv, "bin", "python")
required = ((bench_jit, "configure with -Dbench=true and build bench/bench_jit"),
            (fused_chain, "build bench/fused_chain"),
            (py, "run bench/setup.sh (it creates the JAX venv)"))
for path, why in () if args.from_json else required:
    if not os.path.exists(path):
        sys.exit(f"peers.py: {path} not found: {why}")

# Every child gets the machine's default threading; the peers' own defaults
# (LibTorch's intra-op pool, XLA's thread pool, OpenBLAS's threads) are left alone
# (the table's notes say what they were). OMP_NUM_THREADS, if set, is passed on.
base_env = dict(os.environ)
for var in ("KILN_DEVICE", "KILN_FUSION", "KILN_INPLACE", "KILN_CACHE_DIR",
            "OPENBLAS_CORETYPE", "MESA_SHADER_CACHE_DISABLE", "MESA_SHADER_CACHE_DIR",
            "JAX_PLATFORMS"):
    base_env.pop(var, None)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, env=None, timeout=900):
    if args.verbose:
        log("  $ " + " ".join(f"{k}={v}" for k, v in (env or {}).items()) + " " + " ".join(cmd))
    res = subprocess.run(cmd, env={**base_env, **(env or {})}, capture_output=True, text=True,
                         timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {res.returncode}:\n{res.stderr[-2000:]}")
    return res.stdout


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def gbench(filter_, env=None, repetitions=1):
    """One bench_jit process: ({name: seconds per iteration}, {name: its JSON}, context).
    With repetitions > 1 the matching benchmarks' repetitions run in random
    interleaved order and each gives its median (kiln next to LibTorch in one
    process: load that comes and goes falls on both)."""
    cmd = [bench_jit, f"--benchmark_filter={filter_}", "--benchmark_format=json",
           f"--benchmark_min_time={min_time}"]
    if repetitions > 1:
        cmd += [f"--benchmark_repetitions={repetitions}",
                "--benchmark_enable_random_interleaving=true",
                "--benchmark_report_aggregates_only=true"]
    out = json.loads(run(cmd, env))
    times, counters = {}, {}
    for b in out["benchmarks"]:
        if b.get("error_occurred"):
            continue
        if b.get("run_type") != ("aggregate" if repetitions > 1 else "iteration"):
            continue
        if repetitions > 1 and b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].split("/iterations:")[0].replace("/real_time", "")
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
        times[name] = b["real_time"] * scale
        counters[name] = b
    return times, counters, out.get("context", {})


samples = {}   # key -> list of values (one per repetition)
info = {}      # facts for the notes
errors = {}    # key -> why it has no value


def add(key, value):
    samples.setdefault(key, []).append(value)


def attempt(keys, fn):
    """Runs fn(); a failure is recorded for `keys` (and reported once) instead of
    ending the whole run."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - one failing measurer must not hide the rest
        msg = str(e).strip().splitlines()
        why = msg[-1] if msg else type(e).__name__
        for k in keys:
            if k not in errors:
                log(f"peers.py: {k}: {why}")
            errors[k] = why


# ---- probes: devices, thread counts ----------------------------------------------
def probe_jax():
    code = ("import jax, json; ds = jax.devices(); print(json.dumps({'backend': "
            "jax.default_backend(), 'version': jax.__version__, 'device': "
            "getattr(ds[0], 'device_kind', str(ds[0]))}))")
    try:
        return json.loads(run([py, "-c", code]).strip().splitlines()[-1])
    except Exception as e:  # noqa: BLE001
        return {"backend": "none", "error": str(e).splitlines()[-1]}


HASWELL = {"OPENBLAS_CORETYPE": "Haswell"}
PRESCOTT = {"OPENBLAS_CORETYPE": "Prescott"}
if args.from_json:
    with open(args.from_json) as f:
        saved = json.load(f)
    samples.update(saved["samples"])
    errors.update(saved["errors"])
    info.update(saved["info"])
    jax_probe, (vk, jax_platforms, haswell, reps, args.cases, started_text, load_before,
                load_after) = info["jax"], info["run"]
    vk_label = "kiln Vulkan" + (f" ({vk['device_name'].split(' (')[0]})" if vk else "")
else:
    jax_probe = probe_jax()
    info["jax"] = jax_probe
    jax_platforms = ["cpu"]
    vk = None
    if not args.no_vulkan:
        try:
            vk = json_lines(run([fused_chain, "1024", "1", "arith", "--json"],
                                {"KILN_DEVICE": "vulkan"}))[0]
        except Exception as e:  # noqa: BLE001
            log(f"peers.py: no kiln Vulkan device ({str(e).strip().splitlines()[-1]}); "
                "Vulkan rows skipped")
    vk_is_gpu = vk is not None and vk.get("device_type") in (
        "discrete-gpu", "integrated-gpu", "virtual-gpu")
    vk_label = "kiln Vulkan" + (f" ({vk['device_name'].split(' (')[0]})" if vk else "")
    if vk_is_gpu and jax_probe.get("backend") in ("gpu", "cuda", "rocm"):
        jax_platforms.append("gpu")
    elif vk_is_gpu:
        info["jax_gpu_missing"] = (
            "the Vulkan device is a GPU but the venv's jax has no GPU backend "
            "(pip install 'jax[cuda12]' into it): the Vulkan rows are compared with JAX on the CPU")
    avx2 = "avx2" in open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else False
    haswell = not args.no_haswell and avx2
    # OpenBLAS's oldest x86-64 kernels (SSE3): what it runs on a CPU model it does
    # not know. Issue 20: kiln must stay within 10% of its default there.
    info["prescott"] = not args.no_prescott and platform.machine() in ("x86_64", "AMD64")
prescott = info.get("prescott", False)
info.setdefault("cpus", os.cpu_count())


# ---- measurers: each appends one sample per call ---------------------------------
def case_a_b_cpu():
    t, c, ctx = gbench("BM_kiln_jit_hit/100$|BM_kiln_mlp_step/|BM_torch_mlp_step/",
                       {"KILN_DEVICE": "cpu"}, inner_reps)
    info["torch_threads"] = ctx.get("torch_threads")
    info["openblas_threads"] = ctx.get("openblas_threads")
    info["kiln_threads"] = ctx.get("kiln_threads")
    info["driver.default"] = ctx.get("kiln_cpu_driver")
    if "a" in args.cases:
        add("a.kiln", t["BM_kiln_jit_hit/100"])
    if "b" in args.cases:
        add("b.kiln.cpu", t["BM_kiln_mlp_step"])
        info["b.launches"] = c["BM_kiln_mlp_step"].get("launches")
        if "BM_torch_mlp_step" in t:
            add("b.torch", t["BM_torch_mlp_step"])
        else:
            errors["b.torch"] = "LibTorch not compiled in (bench/setup.sh, then reconfigure)"


def case_b_coretype(env, suffix):
    t, _, ctx = gbench("BM_kiln_mlp_step/|BM_torch_mlp_step/",
                       {"KILN_DEVICE": "cpu", **env}, inner_reps)
    info[f"driver{suffix}"] = ctx.get("kiln_cpu_driver")
    add(f"b.kiln.cpu{suffix}", t["BM_kiln_mlp_step"])
    if "BM_torch_mlp_step" in t:
        add(f"b.torch{suffix}", t["BM_torch_mlp_step"])


def case_b_vulkan():
    t, _, _ = gbench("BM_kiln_mlp_step/", {"KILN_DEVICE": "vulkan"})
    add("b.kiln.vk", t["BM_kiln_mlp_step"])


def jax_script(name, platform, *extra):
    return json_lines(run([py, os.path.join(HERE, "peers", name), "--platform", platform,
                           *extra]))[-1]


def case_a_jax():
    r = jax_script("jax_hit.py", "cpu")
    info["jax_version"] = r.get("jax")
    for k in ("eqx_filter_jit", "jax_jit", "jax_jit_tuples"):
        add(f"a.{k}", r[f"{k}_s"][0])


def case_b_jax(platform):
    add(f"b.jax.{platform}", jax_script("jax_mlp.py", platform)["step_s"][0])


def kiln_first_step(device, env=None, warm_dir=None):
    """Seconds of BM_kiln_mlp_first_step in a fresh process; an empty
    KILN_CACHE_DIR unless warm_dir (a directory a previous process filled)."""
    with tempfile.TemporaryDirectory(prefix="kiln-peers-cache-") as d:
        cache = warm_dir or d
        t, _, _ = gbench("BM_kiln_mlp_first_step",
                         {"KILN_DEVICE": device, "KILN_CACHE_DIR": cache, **(env or {})})
        return t["BM_kiln_mlp_first_step"]


def case_d_kiln_cpu():
    add("d.kiln.cpu", kiln_first_step("cpu"))


def case_d_kiln_vk():
    # lavapipe compiles each pipeline with LLVM and keeps the result in Mesa's own
    # disk cache: measured with that cache empty (a fresh MESA_SHADER_CACHE_DIR),
    # in its default place (warm after any earlier run), and switched off.
    with tempfile.TemporaryDirectory(prefix="kiln-peers-mesa-") as mesa:
        add("d.kiln.vk.mesacold", kiln_first_step("vulkan", {"MESA_SHADER_CACHE_DIR": mesa}))
    with tempfile.TemporaryDirectory(prefix="kiln-peers-cache-") as d:
        add("d.kiln.vk", kiln_first_step("vulkan", warm_dir=d))          # cold: d is empty
        add("d.kiln.vk.warm", kiln_first_step("vulkan", warm_dir=d))     # kiln's disk cache warm
    add("d.kiln.vk.nomesa", kiln_first_step("vulkan", {"MESA_SHADER_CACHE_DISABLE": "true"}))


def case_d_jax(platform):
    add(f"d.jax.{platform}", jax_script("jax_mlp.py", platform, "--mode", "cold")["first_call_s"])


FUSED_SIZES = (1 << 20, 1 << 24)  # 4 MiB per operand (cache), 64 MiB (memory)


def case_e_kiln(device):
    for n in FUSED_SIZES:
        big = n >= 1 << 24
        iters = 3 if args.quick or (device == "vulkan" and big) else 10
        cmd = [fused_chain, str(n), str(iters), "arith", "--json"]
        if device == "vulkan" and big:
            cmd.append("--fused-only")  # unfused 16M chains on lavapipe take seconds per run
        r = json_lines(run(cmd, {"KILN_DEVICE": device}))[0]
        add(f"e.kiln.{device}.{n}", r["fused_gbs"])
        add(f"e.memcpy.{device}.{n}", r["memcpy_gbs"])
        if "unfused_ms" in r:
            add(f"e.kiln.{device}.{n}.unfused", r["bytes"] / (r["unfused_ms"] * 1e-3) / 1e9)
            info[f"e.launches.{device}"] = (r["unfused_launches"], r["fused_launches"])


def case_e_jax(platform):
    for n in FUSED_SIZES:
        add(f"e.jax.{platform}.{n}", jax_script("jax_fused.py", platform, "--n", str(n))["gbs"][0])


def case_c_kiln(device, env=None, suffix=""):
    with tempfile.TemporaryDirectory(prefix="kiln-peers-fmnist-") as d:
        path = os.path.join(d, "out.json")
        run([example, "--model", "mlp", "--epochs", "1", "--batch-size", "128", "--device",
             device, "--seed", "0", "--no-plot", "--no-checkpoint", "--json", path],
            env, timeout=1800)
        with open(path) as f:
            r = json.load(f)
    e = r["epochs"][0]
    add(f"c.kiln.{device}{suffix}", e["train_seconds"])
    add(f"c.kiln.{device}{suffix}.acc", e["test_accuracy"])
    info[f"c.kiln.{device}.steps"] = e["steps"]
    info[f"c.kiln.{device}.trace_count"] = r.get("trace_count")


def case_c_torch(env=None, suffix=""):
    e = json_lines(run([torch_epoch], env))[-1]["epochs"][0]
    add(f"c.torch{suffix}", e["train_seconds"])
    add(f"c.torch{suffix}.acc", e["test_accuracy"])


def case_c_jax(platform):
    r = jax_script("jax_fmnist_epoch.py", platform)
    e = r["epochs"][0]
    add(f"c.jax.{platform}", e["train_seconds"])
    add(f"c.jax.{platform}.acc", e["test_accuracy"])
    add(f"c.jax.{platform}.compile", r["compile_seconds"])
    info["c.jax.steps"] = e["steps"]


def case_f_kiln():
    with tempfile.TemporaryDirectory(prefix="kiln-peers-char-") as d:
        path = os.path.join(d, "out.json")
        run([char_example, "--device", "cpu", "--steps", str(CHAR_STEPS), "--sample-length", "0",
             "--log-every", str(CHAR_STEPS), "--seed", "0", "--json", path], {"KILN_DEVICE": "cpu"})
        with open(path) as f:
            r = json.load(f)
    add("f.kiln.cpu", 1e3 / r["median_step_ms"])
    add("f.kiln.cpu.loss", r["final_loss"])
    info["f.kiln.traces"] = r.get("train_traces")


def case_f_torch():
    r = json_lines(run([torch_char, "--steps", str(CHAR_STEPS), "--seed", "0"]))[-1]
    add("f.torch", 1e3 / r["median_step_ms"])
    add("f.torch.loss", r["final_loss"])
    info["f.parameters"] = r.get("parameters")
    info["f.torch_threads"] = r.get("torch_threads")


MATMUL_THREADS = (1, 2)


def case_g(env=None, suffix=""):
    # Seconds of calls per thread count (kiln and cblas_sgemm interleaved); the
    # Prescott rows are for reference, so shorter.
    seconds = 0.4 if args.quick or suffix else 1.0
    out = json_lines(run([matmul_peak, "--json", "--seconds", str(seconds),
                          "--threads", ",".join(map(str, MATMUL_THREADS))], env))
    for r in out:
        t = r["threads"]
        add(f"g.kiln.{t}{suffix}", r["kiln_gflops"] * 1e9)
        add(f"g.openblas.{t}{suffix}", r["openblas_gflops"] * 1e9)
        if not suffix:
            add(f"g.peak.{t}", r["peak_gflops"] * 1e9)
            info["g.peak_isa"] = r["peak_isa"]
        info[f"driver.matmul{suffix}"] = r["driver"]
        info[f"g.threads.{t}"] = (r["kiln_threads"], r["openblas_threads"])


def kiln_pool_size():
    """kiln's CPU pool size: KILN_NUM_THREADS, else the CPUs in this process's
    affinity mask (runtime/thread_pool.hpp); cnn_step's JSON reports it once it ran."""
    if info.get("h.kiln_threads"):
        return info["h.kiln_threads"]
    env = base_env.get("KILN_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def case_h_kiln():
    r = json_lines(run([cnn_step, str(CNN_STEPS), "--jit", "--json"], {"KILN_DEVICE": "cpu"}))[-1]
    add("h.kiln.cpu", r["median_step_ms"] * 1e-3)
    add("h.kiln.cpu.loss", r["final_loss"])
    info["h.kiln_threads"] = r.get("threads")
    info.setdefault("kiln_threads", r.get("threads"))
    if r.get("driver"):
        info.setdefault("driver.default", r["driver"])


def case_h_torch():
    r = json_lines(run([torch_cnn, "--steps", str(CNN_STEPS),
                        "--threads", str(kiln_pool_size())]))[-1]
    add("h.torch", r["median_step_ms"] * 1e-3)
    add("h.torch.loss", r["final_loss"])
    info["h.torch_threads"] = r.get("threads")


def case_h_jax(platform):
    r = jax_script("jax_cnn_step.py", platform, "--steps", str(CNN_STEPS))
    add(f"h.jax.{platform}", r["median_step_ms"] * 1e-3)
    add(f"h.jax.{platform}.loss", r["final_loss"])
    add(f"h.jax.{platform}.first", r["first_step_ms"] * 1e-3)


plan = []  # (label, keys it fills, function)
if "a" in args.cases or "b" in args.cases:
    plan.append(("kiln CPU + LibTorch (bench_jit)", ["a.kiln", "b.kiln.cpu", "b.torch"],
                 case_a_b_cpu))
if "a" in args.cases:
    plan.append(("Equinox / JAX hit", ["a.eqx_filter_jit", "a.jax_jit", "a.jax_jit_tuples"],
                 case_a_jax))
if "b" in args.cases:
    if haswell:
        plan.append(("kiln CPU + LibTorch, OPENBLAS_CORETYPE=Haswell",
                     ["b.kiln.cpu.haswell", "b.torch.haswell"],
                     lambda: case_b_coretype(HASWELL, ".haswell")))
    if prescott:
        plan.append(("kiln CPU + LibTorch, OPENBLAS_CORETYPE=Prescott",
                     ["b.kiln.cpu.prescott", "b.torch.prescott"],
                     lambda: case_b_coretype(PRESCOTT, ".prescott")))
    if vk:
        plan.append(("kiln Vulkan step", ["b.kiln.vk"], case_b_vulkan))
    for p in jax_platforms:
        plan.append((f"JAX step ({p})", [f"b.jax.{p}"], lambda p=p: case_b_jax(p)))
if "c" in args.cases:
    if os.path.isfile(example):
        plan.append(("kiln Fashion-MNIST epoch (cpu)", ["c.kiln.cpu"], lambda: case_c_kiln("cpu")))
        if haswell:
            plan.append(("kiln Fashion-MNIST epoch (cpu), OPENBLAS_CORETYPE=Haswell",
                         ["c.kiln.cpu.haswell"],
                         lambda: case_c_kiln("cpu", HASWELL, ".haswell")))
        if prescott:
            plan.append(("kiln Fashion-MNIST epoch (cpu), OPENBLAS_CORETYPE=Prescott",
                         ["c.kiln.cpu.prescott"],
                         lambda: case_c_kiln("cpu", PRESCOTT, ".prescott")))
        if vk:
            plan.append(("kiln Fashion-MNIST epoch (vulkan)", ["c.kiln.vulkan"],
                         lambda: case_c_kiln("vulkan")))
    else:
        for k in ("c.kiln.cpu", "c.kiln.vulkan", "c.kiln.cpu.haswell", "c.kiln.cpu.prescott"):
            errors[k] = "kiln example not built"
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        errors["c.jax.cpu"] = "no /usr/share/datasets/fashion-mnist (bench/setup.sh)"
    else:
        for p in jax_platforms:
            plan.append((f"JAX Fashion-MNIST epoch ({p})", [f"c.jax.{p}"],
                         lambda p=p: case_c_jax(p)))
        if os.path.exists(torch_epoch):
            plan.append(("LibTorch Fashion-MNIST epoch", ["c.torch"], case_c_torch))
            if haswell:
                plan.append(("LibTorch Fashion-MNIST epoch, OPENBLAS_CORETYPE=Haswell",
                             ["c.torch.haswell"], lambda: case_c_torch(HASWELL, ".haswell")))
            if prescott:
                plan.append(("LibTorch Fashion-MNIST epoch, OPENBLAS_CORETYPE=Prescott",
                             ["c.torch.prescott"], lambda: case_c_torch(PRESCOTT, ".prescott")))
        else:
            errors["c.torch"] = "LibTorch not compiled in (bench/setup.sh, then reconfigure)"
if "d" in args.cases:
    plan.append(("kiln CPU cold compile", ["d.kiln.cpu"], case_d_kiln_cpu))
    if vk:
        plan.append(("kiln Vulkan cold compile",
                     ["d.kiln.vk", "d.kiln.vk.mesacold", "d.kiln.vk.warm", "d.kiln.vk.nomesa"],
                     case_d_kiln_vk))
    for p in jax_platforms:
        plan.append((f"JAX cold compile ({p})", [f"d.jax.{p}"], lambda p=p: case_d_jax(p)))
if "e" in args.cases:
    for device in ["cpu"] + (["vulkan"] if vk else []):
        plan.append((f"kiln fused chain ({device})",
                     [f"e.{who}.{device}.{n}" for who in ("kiln", "memcpy") for n in FUSED_SIZES],
                     lambda device=device: case_e_kiln(device)))
    for p in jax_platforms:
        plan.append((f"JAX fused chain ({p})", [f"e.jax.{p}.{n}" for n in FUSED_SIZES],
                     lambda p=p: case_e_jax(p)))
if "f" in args.cases:
    if os.path.isfile(char_example):
        plan.append(("kiln char transformer (cpu)", ["f.kiln.cpu"], case_f_kiln))
    else:
        errors["f.kiln.cpu"] = "examples/char_transformer not built"
    if os.path.isfile(torch_char):
        plan.append(("LibTorch char transformer", ["f.torch"], case_f_torch))
    else:
        errors["f.torch"] = "LibTorch not compiled in (bench/setup.sh, then reconfigure)"
if "g" in args.cases:
    g_keys = [f"g.{w}.{t}" for w in ("kiln", "openblas", "peak") for t in MATMUL_THREADS]
    if os.path.isfile(matmul_peak):
        plan.append(("kiln matmul 1024^3 vs FMA peak", g_keys, case_g))
        if prescott:
            plan.append(("kiln matmul 1024^3, OPENBLAS_CORETYPE=Prescott",
                         [f"g.{w}.{t}.prescott" for w in ("kiln", "openblas")
                          for t in MATMUL_THREADS], lambda: case_g(PRESCOTT, ".prescott")))
    else:
        for k in g_keys:
            errors[k] = "bench/matmul_peak not built"
if "h" in args.cases:
    if os.path.isfile(cnn_step):
        plan.append(("kiln CNN step (cpu, filter_jit)", ["h.kiln.cpu"], case_h_kiln))
    else:
        errors["h.kiln.cpu"] = "bench/cnn_step not built"
    if os.path.isfile(torch_cnn):
        plan.append(("LibTorch CNN step", ["h.torch"], case_h_torch))
    else:
        errors["h.torch"] = "LibTorch not compiled in (bench/setup.sh, then reconfigure)"
    plan.append(("JAX CNN step (cpu)", ["h.jax.cpu"], lambda: case_h_jax("cpu")))

if not args.from_json:
    started_text = f"{datetime.datetime.now():%Y-%m-%d %H:%M}"
    load_before = os.getloadavg()[0]
    run_start = time.monotonic()
    case_seconds = {}  # label -> seconds over all repetitions
    for rep in range(reps):
        for label, keys, fn in plan:
            t0 = time.monotonic()
            log(f"[{rep + 1}/{reps}] {label}")
            attempt(keys, fn)
            case_seconds[label] = case_seconds.get(label, 0.0) + time.monotonic() - t0
    load_after = os.getloadavg()[0]
    info["run_seconds"] = time.monotonic() - run_start
    info["case_seconds"] = case_seconds
    log(f"peers.py: {info['run_seconds'] / 60:.1f} min; slowest: " + ", ".join(
        f"{k} {v:.0f} s" for k, v in sorted(case_seconds.items(), key=lambda kv: -kv[1])[:4]))
    info["run"] = [vk, jax_platforms, haswell, reps, args.cases, started_text, load_before,
                   load_after]


# ---- the table --------------------------------------------------------------------
def med(key):
    v = samples.get(key)
    return statistics.median(v) if v else None


def spread(key, unit):
    v = samples.get(key)
    if not v or len(v) < 2:
        return ""
    return f"{fmt(min(v), unit, bare=True)}-{fmt(max(v), unit)}"


def fmt(x, unit, bare=False):
    if x is None:
        return "n/a"
    scale, suffix = {"us": (1e6, " us"), "ms": (1e3, " ms"), "s": (1.0, " s"),
                     "GB/s": (1.0, " GB/s"), "%": (100.0, "%"), "GFLOP/s": (1e-9, " GFLOP/s"),
                     "steps/s": (1.0, " steps/s"), "": (1.0, "")}[unit]
    v = x * scale
    text = f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"
    if unit == "%":
        text = f"{v:.1f}"
    return text if bare else text + suffix


def cell(key, unit):
    if key in samples:
        return fmt(med(key), unit)
    return errors.get(key, "n/a")


rows = []


def code(suffix=".default"):
    """Which CPU code ran, from kiln's DeviceInfo.driver ("kiln SIMD <level>;
    f32 GEMM <what>; <OpenBLAS config> (<core> kernels)") as bench_jit or
    matmul_peak saw it under that OPENBLAS_CORETYPE: "kiln SIMD <level>, f32
    GEMM <what>, OpenBLAS <core> kernels" (older builds name no f32 GEMM)."""
    # The text depends only on the environment: bench_jit's (b) and matmul_peak's
    # (g) report the same one under the same OPENBLAS_CORETYPE.
    alt = {".default": ".matmul", ".prescott": ".matmul.prescott"}.get(suffix, suffix)
    d = info.get(f"driver{suffix}") or info.get(f"driver{alt}")
    if not d:
        return ""
    parts = d.split("; ")
    simd = parts[0]
    core = d.rsplit("(", 1)[-1].rstrip(")") if d.endswith("kernels)") else "?"
    gemm = next((p[len("f32 GEMM "):] for p in parts if p.startswith("f32 GEMM ")), None)
    if gemm is None:
        return f"{simd}, OpenBLAS {core}"
    if gemm.startswith("OpenBLAS"):
        gemm = "OpenBLAS"
    return f"{simd}, f32 GEMM {gemm}, OpenBLAS {core}"


def fmt_ratio(r):
    return f"{r:.3f}" if r < 0.1 else f"{r:.2f}"


def row(case, kiln_label, kiln_key, peer_label, peer_key, unit, target=None, note=""):
    """One table row; target: (text, predicate on the ratio kiln/peer).

    The ratio is the median of the per-repetition ratios when both sides have a
    sample from every repetition (repetition i of kiln with repetition i of the
    peer, measured minutes apart at most: load common to both cancels), else the
    ratio of the medians."""
    ks, ps = samples.get(kiln_key), samples.get(peer_key)
    ratios = [a / b for a, b in zip(ks, ps)] if ks and ps and len(ks) == len(ps) == reps else []
    k, p = med(kiln_key), med(peer_key)
    r = statistics.median(ratios) if ratios else (k / p if k is not None and p is not None
                                                  else None)
    met = "" if target is None else ("n/a" if r is None else ("yes" if target[1](r) else "**no**"))
    spreads = ", ".join(s for s in (
        f"kiln {spread(kiln_key, unit)}" if spread(kiln_key, unit) else "",
        f"peer {spread(peer_key, unit)}" if spread(peer_key, unit) else "",
        f"ratio {fmt_ratio(min(ratios))}-{fmt_ratio(max(ratios))}" if len(ratios) > 1 else "")
        if s)
    rows.append([case, f"{kiln_label}: {cell(kiln_key, unit)}",
                 f"{peer_label}: {cell(peer_key, unit)}",
                 "n/a" if r is None else fmt_ratio(r), "" if target is None else target[0], met,
                 "; ".join(s for s in (note, f"range {spreads}" if spreads else "") if s)])
    return r


if "a" in args.cases:
    a_target = ("<= 0.01 (100x below)", lambda r: r <= 0.01)
    r = row("(a) jit cache hit, 100-leaf model, no work", "filter_jit", "a.kiln",
            "eqx.filter_jit", "a.eqx_filter_jit", "us", a_target)
    if r:
        rows[-1][6] = f"kiln {1 / r:,.0f}x below Equinox; " + rows[-1][6]
    row("(a)", "filter_jit", "a.kiln", "jax.jit, same eqx.Module", "a.jax_jit", "us")
    row("(a)", "filter_jit", "a.kiln", "jax.jit, list of (w, b) tuples", "a.jax_jit_tuples", "us")
# Issue 20's targets (kiln/peer): <= 0.7 of LibTorch, <= 0.8 of JAX, and within 10%
# of kiln's own default with OpenBLAS's Prescott kernels.
torch_target = ("<= 0.7", lambda r: r <= 0.7)
jax_target = ("<= 0.8", lambda r: r <= 0.8)
prescott_target = ("<= 1.10", lambda r: r <= 1.10)


def join(*parts):
    return "; ".join(p for p in parts if p)


if "b" in args.cases:
    launches = info.get("b.launches")
    row("(b) MLP 64-256-256-10 Adam step, batch 128", "kiln CPU", "b.kiln.cpu",
        "LibTorch (eager)", "b.torch", "ms", torch_target,
        join(code(), f"kiln {launches:.0f} launches/step" if launches else ""))
    row("(b)", "kiln CPU", "b.kiln.cpu", "JAX+Optax jax.jit (CPU)", "b.jax.cpu", "ms", jax_target)
    if haswell:
        row("(b) OPENBLAS_CORETYPE=Haswell (kiln and LibTorch)", "kiln CPU", "b.kiln.cpu.haswell",
            "LibTorch", "b.torch.haswell", "ms", note=code(".haswell"))
    if prescott:
        row("(b) OPENBLAS_CORETYPE=Prescott (kiln and LibTorch)", "kiln CPU",
            "b.kiln.cpu.prescott", "LibTorch", "b.torch.prescott", "ms", note=code(".prescott"))
        row("(b) Prescott vs default kernels", "kiln CPU, Prescott", "b.kiln.cpu.prescott",
            "kiln CPU, default", "b.kiln.cpu", "ms", prescott_target,
            "kiln must not depend on a CPU table OpenBLAS may not have")
    if vk:
        peer = ("JAX+Optax (GPU)", "b.jax.gpu") if "gpu" in jax_platforms else (
            "LibTorch (CPU)", "b.torch")
        row("(b)", vk_label, "b.kiln.vk", peer[0], peer[1], "ms")
if "c" in args.cases:
    steps = info.get("c.kiln.cpu.steps") or info.get("c.jax.steps")
    title = f"(c) Fashion-MNIST MLP epoch, train time ({steps or 468} steps)"
    def acc(key, who):
        return f"{who} {fmt(med(key), '%')}" if key in samples else ""

    tc = info.get("c.kiln.cpu.trace_count")
    row(title, "kiln CPU", "c.kiln.cpu", "JAX+Optax jax.jit (CPU)", "c.jax.cpu", "s", jax_target,
        note="; ".join(x for x in (
            "test accuracy " + ", ".join(a for a in (acc("c.kiln.cpu.acc", "kiln"),
                                                     acc("c.jax.cpu.acc", "JAX")) if a),
            f"kiln trace_count {tc}" if tc is not None else "",
            f"JAX compile {fmt(med('c.jax.cpu.compile'), 's')} (not in train time)"
            if "c.jax.cpu.compile" in samples else "") if x))
    row("(c)", "kiln CPU", "c.kiln.cpu", "LibTorch (eager)", "c.torch", "s", torch_target,
        note=join(code(), acc("c.torch.acc", "test accuracy LibTorch")))
    if haswell:
        row("(c) OPENBLAS_CORETYPE=Haswell (kiln and LibTorch)", "kiln CPU", "c.kiln.cpu.haswell",
            "LibTorch", "c.torch.haswell", "s", note=code(".haswell"))
    if prescott:
        row("(c) OPENBLAS_CORETYPE=Prescott (kiln and LibTorch)", "kiln CPU",
            "c.kiln.cpu.prescott", "LibTorch", "c.torch.prescott", "s", note=code(".prescott"))
        row("(c) Prescott vs default kernels", "kiln CPU, Prescott", "c.kiln.cpu.prescott",
            "kiln CPU, default", "c.kiln.cpu", "s", prescott_target)
    if vk:
        peer = ("c.jax.gpu", "JAX+Optax (GPU)") if "gpu" in jax_platforms else (
            "c.jax.cpu", "JAX+Optax (CPU)")
        row("(c)", vk_label, "c.kiln.vulkan", peer[1], peer[0], "s",
            note=f"test accuracy kiln {fmt(med('c.kiln.vulkan.acc'), '%')}"
            if "c.kiln.vulkan.acc" in samples else "")
if "d" in args.cases:
    d_target = ("<= 0.1", lambda r: r <= 0.1)
    row("(d) cold compile + first step (fresh process)", "kiln CPU", "d.kiln.cpu",
        "jax.jit (CPU)", "d.jax.cpu", "ms", d_target)
    if vk:
        jpeer = ("d.jax.gpu", "jax.jit (GPU)") if "gpu" in jax_platforms else (
            "d.jax.cpu", "jax.jit (CPU)")
        row("(d)", f"{vk_label}, Mesa cache empty", "d.kiln.vk.mesacold", jpeer[1], jpeer[0],
            "ms", d_target, "fresh MESA_SHADER_CACHE_DIR: every pipeline compiled by LLVM")
        row("(d)", f"{vk_label}, Mesa cache warm", "d.kiln.vk", jpeer[1], jpeer[0], "ms", d_target,
            "Mesa's shader cache in its default place, warm from earlier runs")
        row("(d)", f"{vk_label}, MESA_SHADER_CACHE_DISABLE=true", "d.kiln.vk.nomesa", jpeer[1],
            jpeer[0], "ms", d_target)
        row("(d)", f"{vk_label}, kiln disk cache warm", "d.kiln.vk.warm", jpeer[1], jpeer[0],
            "ms", note="second process, same KILN_CACHE_DIR (not cold: for reference)")
if "e" in args.cases:
    for n in FUSED_SIZES:
        size = f"{n >> 20}M f32 ({n * 4 >> 20} MiB per operand)"
        lc = info.get("e.launches.cpu")
        unf = cell(f"e.kiln.cpu.{n}.unfused", "GB/s")
        row(f"(e) fused elementwise chain, {size}, GB/s", "kiln CPU", f"e.kiln.cpu.{n}",
            "memcpy (limit)", f"e.memcpy.cpu.{n}", "GB/s", (">= 0.5", lambda r: r >= 0.5),
            note=f"{lc[0]} -> {lc[1]} launches; kiln unfused {unf}" if lc else "")
        row("(e)", "kiln CPU", f"e.kiln.cpu.{n}", "jax.jit (CPU)", f"e.jax.cpu.{n}", "GB/s",
            (">= 1.0", lambda r: r >= 1.0), note="ratio > 1: kiln faster")
        if vk:
            unf = cell(f"e.kiln.vulkan.{n}.unfused", "GB/s")
            row("(e)", vk_label, f"e.kiln.vulkan.{n}", "memcpy (limit)", f"e.memcpy.vulkan.{n}",
                "GB/s", note=f"kiln unfused {unf}" if f"e.kiln.vulkan.{n}.unfused" in samples
                else "")
            if "gpu" in jax_platforms:
                row("(e)", vk_label, f"e.kiln.vulkan.{n}", "jax.jit (GPU)", f"e.jax.gpu.{n}",
                    "GB/s", note="ratio > 1: kiln faster")
if "f" in args.cases:
    def loss(key, who):
        return f"{who} {med(key):.2f}" if key in samples else ""
    params = info.get("f.parameters")
    row(f"(f) char transformer train step (examples/char_transformer: 2 layers, d 64, "
        f"batch 16 x 32, {CHAR_STEPS} steps), steps/s", "kiln CPU", "f.kiln.cpu",
        "LibTorch (eager, bench/torch_char_transformer)", "f.torch", "steps/s",
        note=join("ratio > 1: kiln faster", code(),
                  f"{params} parameters" if params else "",
                  "final loss (mean of last 20 steps) " + ", ".join(
                      x for x in (loss("f.kiln.cpu.loss", "kiln"), loss("f.torch.loss", "LibTorch"))
                      if x) if "f.kiln.cpu.loss" in samples or "f.torch.loss" in samples else "",
                  f"LibTorch intra-op threads {info['f.torch_threads']}"
                  if info.get("f.torch_threads") else ""))
if "g" in args.cases:
    isa = info.get("g.peak_isa", "?")
    for t in MATMUL_THREADS:
        kt = info.get(f"g.threads.{t}")
        threads = f"{t} thread{'s' if t > 1 else ''}"
        row(f"(g) matmul 1024^3 f32, {threads}, GFLOP/s", "kiln CPU", f"g.kiln.{t}",
            f"FMA peak of {t} core{'s' if t > 1 else ''} ({isa})", f"g.peak.{t}", "GFLOP/s",
            (">= 0.70", lambda r: r >= 0.70) if t == 2 else None,
            join(code(".matmul"), f"kiln {kt[0]} threads, OpenBLAS {kt[1]}" if kt else "",
                 "peak: FLOPs per thread CPU second of an FMA loop, summed over threads"))
        row("(g)", "kiln CPU", f"g.kiln.{t}", f"OpenBLAS cblas_sgemm, {threads}",
            f"g.openblas.{t}", "GFLOP/s", note="kiln's f32 GEMM (as named above) vs OpenBLAS "
            "called directly on the same buffers")
        if prescott:
            row("(g) OPENBLAS_CORETYPE=Prescott", "kiln CPU", f"g.kiln.{t}.prescott",
                f"FMA peak of {t} core{'s' if t > 1 else ''}", f"g.peak.{t}", "GFLOP/s",
                note=code(".matmul.prescott"))

if "h" in args.cases:
    def h_loss(key, who):
        return f"{who} {med(key):.4f}" if key in samples else ""
    h_losses = ", ".join(x for x in (h_loss("h.kiln.cpu.loss", "kiln"),
                                     h_loss("h.torch.loss", "LibTorch"),
                                     h_loss("h.jax.cpu.loss", "JAX")) if x)
    kt, tt = info.get("h.kiln_threads"), info.get("h.torch_threads")
    row(f"(h) Fashion-MNIST CNN Adam step (bench/cnn_step's model), batch 128, "
        f"median of {CNN_STEPS} steps", "kiln CPU (jit)", "h.kiln.cpu", "LibTorch (eager)",
        "h.torch", "ms",
        note=join(code(), f"kiln pool {kt} threads" if kt else "",
                  f"LibTorch intra-op threads {tt} (set to kiln's)" if tt else "",
                  f"loss after {CNN_STEPS + 3} steps on the same batch {h_losses}"
                  if h_losses else ""))
    row("(h)", "kiln CPU (jit)", "h.kiln.cpu", "JAX+Optax eqx.filter_jit (CPU)", "h.jax.cpu", "ms",
        note=join(f"JAX first step (compile) {fmt(med('h.jax.cpu.first'), 's')}"
                  if "h.jax.cpu.first" in samples else "",
                  f"XLA CPU its own pool over {info['cpus']} CPUs"))

header = ["case", "kiln", "peer", "kiln/peer", "target", "met?", "notes"]
threads = info.get("torch_threads") or "?"
openblas = info.get("openblas_threads") or "?"
kiln_threads = info.get("kiln_threads") or "?"
omp = os.environ.get("OMP_NUM_THREADS")
notes = [
    f"{started_text}, {info['cpus']} CPUs "
    f"({platform.processor() or platform.machine()}), median of {reps} repetition(s), "
    f"interleaved; load average {load_before:.1f} before, {load_after:.1f} after"
    + (f"; {info['run_seconds'] / 60:.0f} min" if info.get("run_seconds") else ""),
    f"threads (each library's default{', OMP_NUM_THREADS=' + omp if omp else ''}): "
    f"kiln's pool {kiln_threads} (its kernels and its own f32 GEMM), OpenBLAS {openblas} "
    f"(LibTorch's matmuls; kiln's f64 and KILN_GEMM=openblas), "
    f"LibTorch intra-op {threads}, XLA CPU its own pool over {info['cpus']} CPUs",
    f"peers: LibTorch 1.13 (Debian), JAX {jax_probe.get('version', '?')} "
    f"({', '.join(jax_platforms)}), Equinox, Optax (venv {args.venv})",
    "OPENBLAS_CORETYPE unset unless the row says so; the CPU code that ran (kiln's "
    "DeviceInfo.driver): " + (info.get("driver.default") or info.get("driver.matmul") or "?"),
]
if vk:
    notes.append(f"kiln Vulkan device: {vk.get('device_name')} ({vk.get('device_type')})")
if "jax_gpu_missing" in info:
    notes.append(info["jax_gpu_missing"])
widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
print()
for n in notes:
    print(n)
print()
for r in [header] + rows:
    print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
md += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
with open(out_path, "w") as f:
    f.write("\n".join(f"- {n}" for n in notes) + "\n\n" + "\n".join(md) + "\n")
raw_path = os.path.splitext(out_path)[0] + ".json"
with open(raw_path, "w") as f:
    json.dump({"notes": notes, "samples": samples, "errors": errors, "info": info}, f, indent=1,
              default=str)
print(f"\nmarkdown table: {out_path} (every sample: {raw_path})")
if errors:
    print("missing: " + "; ".join(f"{k}: {v}" for k, v in sorted(errors.items())))
