#!/usr/bin/env python3
"""Writes tests/golden/modules.txt: forward values (and some gradients) of
Equinox layers, jax.nn activations and Optax-style losses, computed on the CPU
in f32. tests/test_modules.cpp loads the same weights into kiln::nn modules and
compares; weights are passed explicitly, so initialisation randomness does not
matter, except for the `init_*` cases, which record what Equinox's own
initialisation gives for a fixed key (kiln reproduces jax.random).

Re-run after changing a case here *and* in the C++ test:
  python3 -m venv /tmp/eqxenv && /tmp/eqxenv/bin/pip install -q jax equinox numpy
  /tmp/eqxenv/bin/python tests/golden/make_modules_golden.py

Format, one record per line:  <case> <name> <dtype> <shape a,b,c or - for 0-d> <values...>
Batched inputs go through jax.vmap of the (unbatched) Equinox layer; gradients
are of sum(out * r) for a recorded random cotangent r.
"""
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_platforms", "cpu")
rng = np.random.default_rng(20261206)


def f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


lines = []


def record(case, name, arr):
    arr = np.asarray(arr)
    if arr.dtype == np.bool_:
        arr = arr.astype(np.int32)
    dtype = {np.dtype(np.float32): "f32", np.dtype(np.int32): "i32",
             np.dtype(np.uint32): "u32"}[arr.dtype]
    shape = ",".join(str(d) for d in arr.shape) or "-"
    values = " ".join(repr(float(v)) if dtype == "f32" else str(int(v))
                      for v in arr.reshape(-1))
    lines.append(f"{case} {name} {dtype} {shape} {values}")


def with_params(module, **params):
    for name, value in params.items():
        module = eqx.tree_at(lambda m: getattr(m, name), module, jnp.asarray(value),
                             is_leaf=lambda x: x is None)
    return module


def batched_case(case, module, x, diff=()):
    """Records x, out = vmap(module)(x), r, and grads of sum(out * r) wrt x and
    the named parameters."""
    out = jax.vmap(module)(x)
    r = f32(*out.shape)
    record(case, "x", x)
    record(case, "out", out)
    if diff:
        def loss(m, x):
            return jnp.sum(jax.vmap(m)(x) * r)
        gm, gx = jax.grad(loss, argnums=(0, 1))(module, x)
        record(case, "r", r)
        record(case, "grad_x", gx)
        for name in diff:
            record(case, "grad_" + name, getattr(gm, name))


key = jax.random.PRNGKey(0)

# ---- Linear ----
w, b = f32(5, 3), f32(5)
lin = with_params(eqx.nn.Linear(3, 5, key=key), weight=w, bias=b)
record("linear", "weight", w)
record("linear", "bias", b)
batched_case("linear", lin, f32(4, 3), diff=("weight", "bias"))

# ---- Conv2d: padding 1 ----
w, b = f32(4, 3, 3, 3), f32(4, 1, 1)
conv = with_params(eqx.nn.Conv2d(3, 4, 3, padding=1, key=key), weight=w, bias=b)
record("conv_pad", "weight", w)
record("conv_pad", "bias", b)
batched_case("conv_pad", conv, f32(2, 3, 7, 6), diff=("weight", "bias"))

# ---- Conv2d: stride, asymmetric padding, dilation, groups ----
w, b = f32(6, 2, 3, 2), f32(6, 1, 1)
conv = with_params(eqx.nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=((1, 2), (0, 1)),
                                 dilation=(1, 2), groups=2, key=key), weight=w, bias=b)
record("conv_strided", "weight", w)
record("conv_strided", "bias", b)
batched_case("conv_strided", conv, f32(2, 4, 9, 8), diff=("weight",))

# ---- pools ----
batched_case("maxpool", eqx.nn.MaxPool2d(3, stride=2, padding=1), f32(2, 3, 7, 6), diff=())
batched_case("maxpool_tiled", eqx.nn.MaxPool2d(2, stride=2), f32(2, 3, 6, 7), diff=())
batched_case("avgpool", eqx.nn.AvgPool2d((2, 3), stride=1, padding=((1, 0), (1, 1))),
             f32(2, 3, 5, 6), diff=())


def pool_grad(case, module, x):
    out = jax.vmap(module)(x)
    r = f32(*out.shape)
    gx = jax.grad(lambda x: jnp.sum(jax.vmap(module)(x) * r))(x)
    record(case + "_grad", "x", x)
    record(case + "_grad", "r", r)
    record(case + "_grad", "grad_x", gx)


pool_grad("maxpool", eqx.nn.MaxPool2d(3, stride=2, padding=1), f32(2, 3, 7, 6))
pool_grad("avgpool", eqx.nn.AvgPool2d((2, 3), stride=1, padding=((1, 0), (1, 1))),
          f32(2, 3, 5, 6))

# ---- LayerNorm over the trailing (4, 5) ----
w, b = f32(4, 5, lo=0.5, hi=1.5), f32(4, 5)
ln = with_params(eqx.nn.LayerNorm((4, 5)), weight=w, bias=b)
record("layernorm", "weight", w)
record("layernorm", "bias", b)
batched_case("layernorm", ln, f32(3, 4, 5, lo=-2, hi=2), diff=("weight", "bias"))

# ---- MultiheadAttention ----
mha = eqx.nn.MultiheadAttention(2, 8, key_size=6, value_size=4, output_size=7,
                                use_query_bias=True, use_output_bias=True,
                                key=jax.random.PRNGKey(3))
for proj in ("query_proj", "key_proj", "value_proj", "output_proj"):
    layer = getattr(mha, proj)
    record("mha", proj + ".weight", layer.weight)
    if layer.bias is not None:
        record("mha", proj + ".bias", layer.bias)
q, k, v = f32(2, 5, 8), f32(2, 6, 6), f32(2, 6, 4)
mask = rng.uniform(size=(5, 6)) < 0.7
mask[:, 0] = True  # every query sees at least one key
record("mha", "query", q)
record("mha", "key", k)
record("mha", "value", v)
record("mha", "mask", mask)
record("mha", "out", jax.vmap(lambda q, k, v: mha(q, k, v, mask=mask))(q, k, v))
record("mha", "out_nomask", jax.vmap(lambda q, k, v: mha(q, k, v))(q, k, v))

# ---- activations ----
x = f32(4, 7, lo=-6, hi=6)
x[0, 0], x[0, 1] = 80.0, -80.0  # softmax/log_softmax must stay finite
record("act", "x", x)
record("act", "gelu", jax.nn.gelu(x, approximate=True))
record("act", "gelu_exact", jax.nn.gelu(x, approximate=False))
record("act", "silu", jax.nn.silu(x))
record("act", "softmax", jax.nn.softmax(x))
record("act", "log_softmax", jax.nn.log_softmax(x))
record("act", "log_softmax_axis0", jax.nn.log_softmax(x, axis=0))
record("act", "grad_gelu_exact", jax.grad(lambda x: jnp.sum(jax.nn.gelu(x, approximate=False)))(x))

# ---- losses (mean over the batch) ----
logits = f32(6, 5, lo=-3, hi=3)
labels = np.array([0, 4, 2, 2, 1, 3], np.int32)
targets = np.eye(5, dtype=np.float32)[[1, 0, 4, 2, 3, 3]]
pred, tgt = f32(3, 4), f32(3, 4)


def xent_int(z):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(z), labels[:, None], axis=1))


def xent_onehot(z):
    return -jnp.mean(jnp.sum(targets * jax.nn.log_softmax(z), axis=-1))


def mse(p):
    return jnp.mean((p - tgt) ** 2)


record("loss", "logits", logits)
record("loss", "labels", labels)
record("loss", "targets", targets)
record("loss", "pred", pred)
record("loss", "tgt", tgt)
for name, fn, arg in (("xent_int", xent_int, logits), ("xent_onehot", xent_onehot, logits),
                      ("mse", mse, pred)):
    value, g = jax.value_and_grad(fn)(arg)
    record("loss", name, value)
    record("loss", "grad_" + name, g)

# ---- Equinox's own initialisation for fixed keys ----
lin = eqx.nn.Linear(3, 5, key=jax.random.PRNGKey(7))
record("init_linear", "weight", lin.weight)
record("init_linear", "bias", lin.bias)
conv = eqx.nn.Conv2d(2, 4, (3, 2), key=jax.random.PRNGKey(8))
record("init_conv", "weight", conv.weight)
record("init_conv", "bias", conv.bias)

out = pathlib.Path(__file__).with_name("modules.txt")
out.write_text("# generated by make_modules_golden.py with jax " + jax.__version__
               + ", equinox " + eqx.__version__ + "\n" + "\n".join(lines) + "\n")
print(f"wrote {out} ({len(lines)} records)")
