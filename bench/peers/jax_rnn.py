#!/usr/bin/env python3
"""The peer row of bench/rnn_scan.cpp: the same GRU (batch 32, in 16, hidden 64,
gates z, r, n side by side) trained with one jitted SGD step, the sequence
loop as jax.lax.scan. Prints, per length: the first call's time (trace, lower,
XLA compile, run; persistent cache off) and the median step time.
  /tmp/jaxenv/bin/python bench/peers/jax_rnn.py [steps...]
"""
import sys
import time

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_compilation_cache", False)
B, IN, H = 32, 16, 64


def cell(p, h, x):
    gx = x @ p["wx"] + p["b"]
    gh = h @ p["wh"]
    z = jax.nn.sigmoid(gx[:, :H] + gh[:, :H])
    r = jax.nn.sigmoid(gx[:, H:2 * H] + gh[:, H:2 * H])
    n = jnp.tanh(gx[:, 2 * H:] + r * gh[:, 2 * H:])
    return (1.0 - z) * n + z * h


def loss(p, xs, ys):
    def body(h, xy):
        x, y = xy
        nxt = cell(p, h, x)
        d = nxt @ p["wo"] - y
        return nxt, jnp.sum(d * d)
    _, err = jax.lax.scan(body, jnp.zeros((B, H)), (xs, ys))
    return jnp.sum(err) / (xs.shape[0] * B)


@jax.jit
def step(p, xs, ys):
    l, g = jax.value_and_grad(loss)(p, xs, ys)
    return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g), l


def main():
    lengths = [int(a) for a in sys.argv[1:]] or [64, 256]
    k = jax.random.split(jax.random.PRNGKey(0), 5)
    p = {"wx": jax.random.normal(k[0], (IN, 3 * H)) * 0.25,
         "wh": jax.random.normal(k[1], (H, 3 * H)) * 0.125,
         "b": jnp.zeros((3 * H,)),
         "wo": jax.random.normal(k[2], (H, 1)) * 0.125}
    for t in lengths:
        xs = jax.random.normal(k[3], (t, B, IN))
        ys = jax.random.normal(k[4], (t, B, 1))
        jax.clear_caches()
        t0 = time.perf_counter()
        q, l = step(p, xs, ys)
        l.block_until_ready()
        first = (time.perf_counter() - t0) * 1e3
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            q, l = step(q, xs, ys)
            l.block_until_ready()
            times.append((time.perf_counter() - t0) * 1e3)
        times.sort()
        print(f"jax scan  T={t:<4d} first call (trace+compile+run) {first:9.1f} ms   "
              f"step {times[len(times) // 2]:8.2f} ms   loss {float(l):.5f}")


main()
