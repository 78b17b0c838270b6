#!/usr/bin/env python3
"""The PyTorch (CUDA) and JAX (CUDA) peers of bench/gpu_steps.cpp (kiln on Vulkan,
issue 40's GPU table): the same cases, sizes and timing, the same JSON lines.
scripts/gpu/device_run.sh runs it once per framework on the device machine and
bench/run_gpu.py joins the lines by (case, dtype, n) into one table:

  python3 bench/peers/gpu_peers.py --impl torch|jax [--cases matmul,mlp,cnn,
      transformer,embedding_grad,sort] [--sizes 1024,2048,4096,8192]
      [--repetitions 5] [--platform gpu|cpu] [--small]

One framework per process (each grabs GPU memory). f32 is real f32 on both: torch
with allow_tf32 off for matmul and cuDNN, JAX with jax_default_matmul_precision
"highest" (and XLA_PYTHON_CLIENT_PREALLOCATE=false); every line says "tf32": false.
--platform cpu with --small (gpu_steps' --small sizes: matmul 64, 128; MLP batch
64, 64-256-256-100; CNN batch 16; transformer batch 2, seq 32, embed 64, heads 2;
embedding vocab 512, tokens 256; sort 4096) is a smoke test without a GPU.

Timing: 5 warm-up calls (compile, autotune, allocator caches), then --repetitions timed samples,
each ending in a full device sync; "ms" is their median, "samples" all of them.
First line {"case": "env", ...} (versions, device, driver); then one line per case
(per dtype and n for matmul); a case that fails (e.g. OOM) prints {"case", "impl",
"error"} and the next one runs. The step cases print "n": null (their sizes are
extra fields) and "first_loss" (the initial weights') besides "final_loss".

matmul (f32, f16, bf16; n in --sizes): C = A @ B, A, B (n, n) normal(0, 1) cast to
  the dtype, C of the dtype (f16/bf16 accumulate in f32, the frameworks' default).
  A sample is k back-to-back products then a sync, divided by k, with
  k = max(1, ceil(2e12 / (2 n^3))) (2e8 with --small); "tflops" = 2 n^3 / (ms 1e9).
  JAX: a jitted jnp.matmul (precision HIGHEST for f32), block_until_ready on the last.
mlp_step (f32): 1024 -> 4096 -> 4096 -> 1000, Linear with bias, ReLU between,
  batch 2048, x[i, j] = ((i * 1024 + j) % 251) / 251, label i % 1000, softmax
  cross entropy (mean). One step = forward + backward + Adam (lr 1e-3, betas 0.9,
  0.999, eps 1e-8), timed up to the loss as a Python float. torch: eager
  nn.Sequential, torch.optim.Adam (foreach); JAX: jax.jit, optax.adam, params and
  optimizer state donated. Weights uniform +-1/sqrt(fan_in) (as kiln's), each
  framework's own PRNG.
cnn_step (f32): x (512, 1, 28, 28) NCHW, x[flat j] = (j % 251) / 251, label i % 10;
  conv 1->32 3x3 pad 1 (bias), ReLU, maxpool 2/2, conv 32->64 3x3 pad 1 (bias),
  ReLU, maxpool 2/2, flatten 64*7*7 -> linear 10; softmax CE; Adam step as above.
transformer_step (f32): one pre-norm block as kiln's nn::TransformerBlock, batch 16,
  seq 512, embed 512, heads 8, mlp 2048: h = x + Wo attn(RoPE(Wq ln1(x)),
  RoPE(Wk ln1(x)), Wv ln1(x)), out = h + W2 gelu_tanh(W1 ln2(h) + b1) + b2.
  LayerNorm eps 1e-5 with weight (ones) and bias (zeros); q, k, v, o projections
  without bias; causal, scale 1/sqrt(head_dim); RoPE rotate-half (pairs (i, i +
  d/2) of each head, angle p * 10000^(-2i/d), tables made in f64 and cast to f32,
  as kiln). x[b, s, e] = sin(0.01 * (flat index % 1000)), loss = mean(block(x)^2),
  Adam step as above. Given the same weights, the torch and JAX blocks agree
  (loss and gradients to ~1e-8). Differences from kiln's block that remain:
  - torch calls F.scaled_dot_product_attention(is_causal=True) ("sdpa": true), a
    fused kernel (-inf masking, scale applied inside, no (S, S) weights kept);
    JAX writes the attention in jnp as kiln does ((q * scale) k^T, finfo.min
    masking, softmax, @ v; "attention": "jnp").
  - initial weights come from each framework's PRNG (kiln's distributions), so
    the losses differ from kiln's in the digits, not in size;
  - x is computed in f64 and rounded to f32 (kiln: sin in f32), <= 1 ulp apart;
  - Adam is torch.optim.Adam / optax.adam (same update rule as kiln's optim::adam).
embedding_grad (f32): grad wrt table (32768, 64) of sum(take(table, ids) * weights),
  8192 ids; as bench/peers/jax_ops.py; torch via torch.autograd.grad. "n": null.
sort (f32, n = 1 << 20): uniform [0, 1) values; jitted jnp.sort / torch.sort(x,
  stable=True).values.
"""
import argparse
import gc
import itertools
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
from common import emit

ap = argparse.ArgumentParser()
ap.add_argument("--impl", choices=["torch", "jax"], required=True)
ap.add_argument("--cases", default="matmul,mlp,cnn,transformer,embedding_grad,sort")
ap.add_argument("--sizes", default=None, help="matmul n, comma-separated")
ap.add_argument("--repetitions", type=int, default=5)
ap.add_argument("--platform", choices=["gpu", "cpu"], default="gpu")
ap.add_argument("--small", action="store_true", help="tiny sizes for a CPU smoke test")
args = ap.parse_args()

WARMUP = 5
S = args.small
SIZES = [int(s) for s in (args.sizes or ("64,128" if S else "1024,2048,4096,8192")).split(",")]
FLOP_BUDGET = 2e8 if S else 2e12  # per matmul sample
# --small: bench/gpu_steps.cpp's --small sizes, so a dry run's table joins like rows.
MLP = {"batch": 64, "sizes": (64, 256, 256, 100)} if S else \
    {"batch": 2048, "sizes": (1024, 4096, 4096, 1000)}
CNN_BATCH = 16 if S else 512
TF = {"batch": 2, "seq": 32, "embed": 64, "heads": 2} if S else \
    {"batch": 16, "seq": 512, "embed": 512, "heads": 8}
EMB = {"vocab": 512, "dim": 64, "tokens": 256} if S else {"vocab": 32768, "dim": 64, "tokens": 8192}
SORT_N = 4096 if S else 1 << 20

if args.impl == "jax":
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if args.platform == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"


def driver_version():
    if args.platform != "gpu" or not shutil.which("nvidia-smi"):
        return None
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           check=False, capture_output=True, text=True, timeout=20)
        return r.stdout.strip() or None
    except Exception:  # noqa: BLE001 - informational only
        return None


def timed(call, per=1):
    """WARMUP untimed calls, then --repetitions timed ones (call() ends in a sync);
    returns the fields (ms / per) and what the first and the last call returned."""
    samples = []
    for i in range(WARMUP + args.repetitions):
        t0 = time.perf_counter()
        out = call()
        ms = (time.perf_counter() - t0) * 1e3
        if i == 0:
            first, first_ms = out, ms
        if i >= WARMUP:
            samples.append(ms / per)
    return {"ms": statistics.median(samples), "samples": [round(t, 5) for t in samples],
            "first_call_ms": round(first_ms, 3)}, first, out


def x_mlp():  # x[i, j] = ((i * in + j) % 251) / 251 (f64; the caller casts), label i % classes
    b, i = MLP["batch"], MLP["sizes"][0]
    return (np.arange(b * i) % 251).reshape(b, i) / 251.0, np.arange(b) % MLP["sizes"][-1]


def x_cnn():
    x = (np.arange(CNN_BATCH * 784) % 251) / 251.0
    return x.reshape(CNN_BATCH, 1, 28, 28), np.arange(CNN_BATCH) % 10


def x_transformer():
    b, s, e = TF["batch"], TF["seq"], TF["embed"]
    return np.sin(0.01 * (np.arange(b * s * e) % 1000)).reshape(b, s, e)


def rope_tables(seq, d, theta=10000.0):
    """cos, sin (seq, d/2) in f64 as kiln's RotaryPositionalEmbedding."""
    ang = np.arange(seq)[:, None] * theta ** (-2.0 * np.arange(d // 2)[None, :] / d)
    return np.cos(ang), np.sin(ang)


def matmul_cases(base, operands, product, wait):
    """One matmul line per dtype and n: operands(dtype, n) -> (a, b); product(dtype,
    a, b) -> a @ b; wait(c) syncs. A sample is k products, then the sync."""
    for d in ("f32", "f16", "bf16"):
        for n in SIZES:
            def one(d=d, n=n):
                a, b = operands(d, n)
                k = max(1, math.ceil(FLOP_BUDGET / (2 * n ** 3)))

                def sample():
                    for _ in range(k):
                        c = product(d, a, b)
                    wait(c)
                r = timed(sample, per=k)[0]
                return {"dtype": d, "n": n, "k": k, "tflops": 2 * n ** 3 / (r["ms"] * 1e9), **r}
            run_case("matmul", base, one, dtype=d, n=n)


# ---------------------------------------------------------------- torch
def torch_impl():
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu = args.platform == "gpu"
    if gpu and not torch.cuda.is_available():
        sys.exit("--platform gpu: torch sees no CUDA device")
    dev = torch.device("cuda" if gpu else "cpu")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    base = {"impl": "torch", "device": torch.cuda.get_device_name() if gpu else "cpu",
            "framework": torch.__version__, "tf32": False}
    emit({"case": "env", **base, "cuda": torch.version.cuda, "driver": driver_version(),
          "cudnn": torch.backends.cudnn.version() if gpu else None, "platform": args.platform,
          "allow_tf32": [torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32]})
    torch.manual_seed(0)
    t = lambda a, dt=torch.float32: torch.as_tensor(np.asarray(a), device=dev).to(dt)
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

    def matmul():
        randn = lambda d, n: torch.randn(n, n, device=dev).to(dtypes[d])
        matmul_cases(base, lambda d, n: (randn(d, n), randn(d, n)), lambda d, a, b: a @ b,
                     lambda c: sync())

    def train(model, x, y, loss_fn):
        model = model.to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            out = loss.item()
            sync()
            return out
        r, first, last = timed(step)
        return {"dtype": "f32", "n": None, "first_loss": first, "final_loss": last, **r}

    def mlp():
        s = MLP["sizes"]
        layers = []
        for i, (a, b) in enumerate(itertools.pairwise(s)):
            layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(s) - 2 else [])
        x, y = x_mlp()
        return {"batch": MLP["batch"],
                **train(nn.Sequential(*layers), t(x), t(y, torch.long), F.cross_entropy)}

    def cnn():
        model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
                              nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
                              nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
        x, y = x_cnn()
        return {"batch": CNN_BATCH, **train(model, t(x), t(y, torch.long), F.cross_entropy)}

    class Block(nn.Module):
        def __init__(self, e, h, s):
            super().__init__()
            self.h = h
            self.ln1, self.ln2 = nn.LayerNorm(e, eps=1e-5), nn.LayerNorm(e, eps=1e-5)
            self.q, self.k, self.v, self.o = (nn.Linear(e, e, bias=False) for _ in range(4))
            self.fc1, self.fc2 = nn.Linear(e, 4 * e), nn.Linear(4 * e, e)
            cos, sin = rope_tables(s, e // h)
            self.register_buffer("cos", t(cos))
            self.register_buffer("sin", t(sin))

        def rope(self, z):  # (B, H, S, d), rotate-half as kiln
            z1, z2 = z.chunk(2, dim=-1)
            return torch.cat([z1 * self.cos - z2 * self.sin, z2 * self.cos + z1 * self.sin], -1)

        def forward(self, x):
            B, S, E = x.shape
            heads = lambda z: z.view(B, S, self.h, E // self.h).transpose(1, 2)
            a = self.ln1(x)
            q, k, v = self.rope(heads(self.q(a))), self.rope(heads(self.k(a))), heads(self.v(a))
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = x + self.o(att.transpose(1, 2).reshape(B, S, E))
            return h + self.fc2(F.gelu(self.fc1(self.ln2(h)), approximate="tanh"))

    def transformer():
        x = t(x_transformer())
        model = Block(TF["embed"], TF["heads"], TF["seq"])
        return {**TF, "sdpa": True,
                **train(model, x, None, lambda out, _: (out * out).mean())}

    def embedding_grad():
        ids = torch.randint(0, EMB["vocab"], (EMB["tokens"],), device=dev)
        table = torch.randn(EMB["vocab"], EMB["dim"], device=dev).requires_grad_()
        w = torch.randn(EMB["tokens"], EMB["dim"], device=dev)

        def sample():
            (g,) = torch.autograd.grad((table[ids] * w).sum(), table)
            sync()
            return g
        return {"dtype": "f32", "n": None, **EMB, **timed(sample)[0]}

    def sort():
        x = torch.rand(SORT_N, device=dev)

        def sample():
            r = torch.sort(x, stable=True).values
            sync()
            return r
        return {"dtype": "f32", "n": SORT_N, **timed(sample)[0]}

    def cleanup():  # after each case: its tensors (or an OOM's) go back to the device
        gc.collect()
        if gpu:
            torch.cuda.empty_cache()
    return base, cleanup, {"matmul": matmul, "mlp": mlp, "cnn": cnn, "transformer": transformer,
                           "embedding_grad": embedding_grad, "sort": sort}


# ---------------------------------------------------------------- jax
def jax_impl():
    from functools import partial

    import jax
    import jax.numpy as jnp
    import optax
    from jax import lax

    jax.config.update("jax_default_matmul_precision", "highest")
    d0 = jax.devices()[0]
    if args.platform == "gpu" and d0.platform == "cpu":
        sys.exit("--platform gpu: this jax has no GPU backend")
    base = {"impl": "jax", "device": getattr(d0, "device_kind", str(d0)),
            "framework": jax.__version__, "tf32": False}
    try:
        import jaxlib
        from jax.extend import backend
        extra = {"jaxlib": jaxlib.__version__,
                 "platform_version": backend.get_backend().platform_version}
    except Exception as e:  # noqa: BLE001 - informational only
        extra = {"jaxlib": None, "platform_version": repr(e)}
    emit({"case": "env", **base, **extra, "driver": driver_version(), "platform": args.platform,
          "matmul_precision": getattr(jax.config, "jax_default_matmul_precision", None)})
    f32 = lambda a: jnp.asarray(np.asarray(a, np.float32))
    counter = iter(range(1 << 30))
    new_key = lambda: jax.random.fold_in(jax.random.key(0), next(counter))
    dtypes = {"f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16}

    def matmul():
        highest = {"f32": lax.Precision.HIGHEST}
        mm = {d: jax.jit(partial(jnp.matmul, precision=highest.get(d))) for d in dtypes}
        randn = lambda d, n: jax.random.normal(new_key(), (n, n)).astype(dtypes[d])
        matmul_cases(base, lambda d, n: (randn(d, n), randn(d, n)), lambda d, a, b: mm[d](a, b),
                     lambda c: c.block_until_ready())

    def linear(key, i, o, bias=True):  # weight (o, i), bias (o,): uniform +-1/sqrt(i), as kiln
        kw, kb = jax.random.split(key)
        lim = 1.0 / math.sqrt(i)
        p = {"w": jax.random.uniform(kw, (o, i), minval=-lim, maxval=lim)}
        if bias:
            p["b"] = jax.random.uniform(kb, (o,), minval=-lim, maxval=lim)
        return p

    def dense(p, x):
        y = x @ p["w"].T
        return y + p["b"] if "b" in p else y

    def train(loss_fn, params, x, y):
        opt = optax.adam(1e-3, b1=0.9, b2=0.999, eps=1e-8)

        @partial(jax.jit, donate_argnums=(0, 1))
        def step(params, opt_state, x, y):
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            updates, opt_state = opt.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        state = [params, opt.init(params)]

        def sample():
            p, s, loss = step(state[0], state[1], x, y)
            jax.block_until_ready((p, s))
            state[:] = [p, s]
            return float(loss)
        r, first, last = timed(sample)
        return {"dtype": "f32", "n": None, "first_loss": first, "final_loss": last, **r}

    def ce(logits, y):
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def mlp():
        s = MLP["sizes"]
        params = [linear(new_key(), a, b) for a, b in itertools.pairwise(s)]

        def loss_fn(params, x, y):
            for p in params[:-1]:
                x = jax.nn.relu(dense(p, x))
            return ce(dense(params[-1], x), y)
        x, y = x_mlp()
        return {"batch": MLP["batch"], **train(loss_fn, params, f32(x), jnp.asarray(y, jnp.int32))}

    def cnn():
        def conv_init(key, cin, cout):
            kw, kb = jax.random.split(key)
            lim = 1.0 / math.sqrt(cin * 9)
            return {"w": jax.random.uniform(kw, (cout, cin, 3, 3), minval=-lim, maxval=lim),
                    "b": jax.random.uniform(kb, (cout,), minval=-lim, maxval=lim)}

        def conv(p, x):
            y = lax.conv_general_dilated(x, p["w"], (1, 1), ((1, 1), (1, 1)),
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"))
            return y + p["b"][None, :, None, None]

        def pool(x):
            return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

        params = {"c1": conv_init(new_key(), 1, 32), "c2": conv_init(new_key(), 32, 64),
                  "fc": linear(new_key(), 64 * 7 * 7, 10)}

        def loss_fn(p, x, y):
            h = pool(jax.nn.relu(conv(p["c1"], x)))
            h = pool(jax.nn.relu(conv(p["c2"], h)))
            return ce(dense(p["fc"], h.reshape(h.shape[0], -1)), y)
        x, y = x_cnn()
        return {"batch": CNN_BATCH, **train(loss_fn, params, f32(x), jnp.asarray(y, jnp.int32))}

    def transformer():
        e, nh, s = TF["embed"], TF["heads"], TF["seq"]
        d = e // nh
        cos, sin = (f32(a) for a in rope_tables(s, d))
        ln = lambda: {"w": jnp.ones(e), "b": jnp.zeros(e)}
        params = {"ln1": ln(), "ln2": ln(), "fc1": linear(new_key(), e, 4 * e),
                  "fc2": linear(new_key(), 4 * e, e),
                  **{n: linear(new_key(), e, e, bias=False) for n in ("q", "k", "v", "o")}}

        def layer_norm(p, x):
            c = x - x.mean(-1, keepdims=True)
            return c * lax.rsqrt((c * c).mean(-1, keepdims=True) + 1e-5) * p["w"] + p["b"]

        def rope(z):  # (B, H, S, d), rotate-half as kiln
            z1, z2 = jnp.split(z, 2, axis=-1)
            return jnp.concatenate([z1 * cos - z2 * sin, z2 * cos + z1 * sin], -1)

        def block(p, x):
            B = x.shape[0]
            heads = lambda z: z.reshape(B, s, nh, d).transpose(0, 2, 1, 3)
            a = layer_norm(p["ln1"], x)
            q, k = rope(heads(dense(p["q"], a))), rope(heads(dense(p["k"], a)))
            v = heads(dense(p["v"], a))
            logits = (q * (1.0 / math.sqrt(d))) @ k.swapaxes(-1, -2)
            mask = jnp.tril(jnp.ones((s, s), bool))
            logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
            att = jax.nn.softmax(logits, axis=-1) @ v
            h = x + dense(p["o"], att.transpose(0, 2, 1, 3).reshape(B, s, e))
            m = jax.nn.gelu(dense(p["fc1"], layer_norm(p["ln2"], h)), approximate=True)
            return h + dense(p["fc2"], m)

        def loss_fn(p, x, _):
            out = block(p, x)
            return (out * out).mean()
        return {**TF, "attention": "jnp", **train(loss_fn, params, f32(x_transformer()), None)}

    def embedding_grad():
        ids = jax.random.randint(new_key(), (EMB["tokens"],), 0, EMB["vocab"])
        table = jax.random.normal(new_key(), (EMB["vocab"], EMB["dim"]))
        w = jax.random.normal(new_key(), (EMB["tokens"], EMB["dim"]))
        # ids and weights are arguments: as constants XLA would fold the scatter.
        g = jax.jit(jax.grad(lambda t, i, v: jnp.sum(jnp.take(t, i, axis=0) * v)))
        return {"dtype": "f32", "n": None, **EMB,
                **timed(lambda: g(table, ids, w).block_until_ready())[0]}

    def sort():
        x = jax.random.uniform(new_key(), (SORT_N,))
        srt = jax.jit(jnp.sort)
        return {"dtype": "f32", "n": SORT_N, **timed(lambda: srt(x).block_until_ready())[0]}

    return base, gc.collect, {"matmul": matmul, "mlp": mlp, "cnn": cnn,
                              "transformer": transformer, "embedding_grad": embedding_grad,
                              "sort": sort}


CASE_NAMES = {"matmul": "matmul", "mlp": "mlp_step", "cnn": "cnn_step",
              "transformer": "transformer_step", "embedding_grad": "embedding_grad", "sort": "sort"}


def run_case(name, base, fn, **key):
    """Runs fn() and prints its line, or an error line; never raises."""
    try:
        emit({"case": name, **base, **fn()})
    except Exception as e:  # noqa: BLE001 - one failing case must not stop the rest
        emit({"case": name, "impl": base["impl"], **key, "error": f"{type(e).__name__}: {e}"[:600]})
    finally:
        CLEANUP()


if __name__ == "__main__":
    base, CLEANUP, cases = (torch_impl if args.impl == "torch" else jax_impl)()
    for c in args.cases.split(","):
        if c not in cases:
            emit({"case": c, "impl": args.impl, "error": f"unknown case, not in {list(cases)}"})
        elif c == "matmul":
            cases[c]()  # one line (or error) per dtype and n
        else:
            run_case(CASE_NAMES[c], base, cases[c])
