#!/usr/bin/env python3
"""Case (a): jit cache-hit host overhead on a 100-leaf model, the peer side of
bench_jit's BM_kiln_jit_hit/100.

The model is 50 (weight f32[4,4], bias f32[4]) pairs plus a static float, as in
bench/bench_jit.cpp; the jitted function does no work (it returns one input
leaf), so a call's time is argument flattening, cache lookup and dispatch.
Measured for eqx.filter_jit and jax.jit on that eqx.Module (a pytree whose
static field jax.jit treats as static; its nodes flatten in Python), and for
jax.jit on the same 100 arrays as a list of (weight, bias) tuples, which JAX
flattens in C++ (its fastest path). Mean seconds per call over
a >= 0.5 s loop, once per --repetitions; one block_until_ready after the loop.
"""
from common import describe, emit, parse_args, per_call_seconds

args = parse_args(lambda ap: (ap.add_argument("--leaves", type=int, default=100),
                              ap.add_argument("--repetitions", type=int, default=1)))

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


class Pair(eqx.Module):
    weight: jax.Array
    bias: jax.Array


class Model(eqx.Module):
    layers: list
    scale: float = eqx.field(static=True, default=1.0)


model = Model([Pair(jnp.ones((4, 4)), jnp.ones((4,))) for _ in range(args.leaves // 2)])
assert len(jax.tree_util.tree_leaves(model)) == args.leaves


def first_bias(m):
    return m.layers[0].bias


plain = [(p.weight, p.bias) for p in model.layers]
result = {"case": "jit_hit", "leaves": args.leaves, **describe(jax)}
for name, f, arg in (("eqx_filter_jit", eqx.filter_jit(first_bias), model),
                     ("jax_jit", jax.jit(first_bias), model),
                     ("jax_jit_tuples", jax.jit(lambda p: p[0][1]), plain)):
    f(arg).block_until_ready()  # compile: every later call is a cache hit
    result[name + "_s"] = [per_call_seconds(lambda: f(arg), jax.block_until_ready)[0]
                           for _ in range(args.repetitions)]
emit(result)
