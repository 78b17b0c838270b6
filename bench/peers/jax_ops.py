#!/usr/bin/env python3
"""The peers of bench/ops_bench.cpp: the gradient of an embedding lookup
(jax.grad through jnp.take: XLA's scatter-add) and the sort of n f32 under
jax.jit, plus numpy's sort (np.sort, kind="stable" as kiln's order) of the same
n on the host. Median ms over --repetitions timed calls after a warm-up, each
followed by block_until_ready. One JSON object per case.
"""
import statistics
import time

from common import describe, emit, parse_args

args = parse_args(lambda ap: (ap.add_argument("--vocab", type=int, default=32768),
                              ap.add_argument("--dim", type=int, default=64),
                              ap.add_argument("--tokens", type=int, default=8192),
                              ap.add_argument("--n", type=int, default=1 << 20),
                              ap.add_argument("--repetitions", type=int, default=5)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

DEVICE = describe(jax)


def median_ms(call):
    call()
    times = []
    for _ in range(args.repetitions):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


ids = jax.random.randint(jax.random.key(0), (args.tokens,), 0, args.vocab)
table = jax.random.normal(jax.random.key(1), (args.vocab, args.dim))
weights = jax.random.normal(jax.random.key(2), (args.tokens, args.dim))
# ids and weights are arguments: captured as constants, XLA would fold the
# whole scatter at compile time (the gradient does not depend on the table).
step = jax.jit(jax.grad(lambda w, i, v: jnp.sum(jnp.take(w, i, axis=0) * v)))
emit({"case": "embedding_grad", "variant": "jax", **DEVICE, "vocab": args.vocab,
      "dim": args.dim, "tokens": args.tokens,
      "ms": median_ms(lambda: step(table, ids, weights).block_until_ready())})

x = jax.random.uniform(jax.random.key(3), (args.n,))
sort = jax.jit(jnp.sort)
emit({"case": "sort", "variant": "jax", **DEVICE, "n": args.n,
      "ms": median_ms(lambda: sort(x).block_until_ready())})
xh = np.asarray(x)
emit({"case": "sort", "variant": "numpy", "n": args.n,
      "ms": median_ms(lambda: np.sort(xh, kind="stable"))})
