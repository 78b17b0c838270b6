#!/usr/bin/env python3
"""Case (e): the elementwise chain of bench/fused_chain.cpp's "arith" case under
jax.jit (XLA fuses it into one loop): x f32[n/1024, 1024], b f32[1024],
  h = x * 1.5 + b; h = max(h, 0) * 0.5 + (x - b);
  h = where(h > 0.25, h * h, -h) / (|x| + 1); out = h * h - 1.
GB/s counts the bytes of the inputs read and the output written once
((2n + 1024) * 4), as fused_chain does for kiln. Mean over a >= 0.5 s loop of
calls, each followed by block_until_ready, once per --repetitions.
"""
from common import describe, emit, parse_args, per_call_seconds

args = parse_args(lambda ap: (ap.add_argument("--n", type=int, default=1 << 24),
                              ap.add_argument("--repetitions", type=int, default=1)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

DEVICE = describe(jax)


@jax.jit
def chain(x, b):
    h = x * 1.5 + b
    h = jnp.maximum(h, 0.0) * 0.5 + (x - b)
    h = jnp.where(h > 0.25, h * h, -h) / (jnp.abs(x) + 1.0)
    return h * h - 1.0


n = args.n
x = jax.random.normal(jax.random.key(0), (n // 1024, 1024))
b = jax.random.normal(jax.random.key(1), (1024,))
chain(x, b).block_until_ready()
nbytes = (2 * (n // 1024) * 1024 + 1024) * 4
times = [per_call_seconds(lambda: chain(x, b).block_until_ready(), lambda _: None)[0]
         for _ in range(args.repetitions)]
emit({"case": "fused_chain", "n": n, "bytes": nbytes, "seconds": times,
      "gbs": [nbytes / t / 1e9 for t in times], **DEVICE})
