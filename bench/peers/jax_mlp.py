#!/usr/bin/env python3
"""Cases (b) and (d): the MLP Adam training step of bench_jit (64-256-256-10 ReLU,
batch 128, softmax cross entropy, Adam lr 1e-3) as JAX + Optax, jax.jit with the
parameters and optimizer state donated (JAX's recommended fast path).

--mode step: a training loop's time per step. Three warm-up steps, then the mean
  over a >= 0.5 s loop with one block_until_ready at its end (dispatch is
  asynchronous, as in a real training loop), once per --repetitions.
--mode cold: this process's first call of the jitted step (trace, lower, XLA
  compile, first run, block_until_ready), with the persistent compilation cache
  off. Run it in a fresh process per sample. The inputs are made (and JAX's
  backend started) before the clock starts, as bench_jit does for kiln.
"""
import time
from functools import partial

from common import describe, emit, parse_args, per_call_seconds

args = parse_args(lambda ap: (ap.add_argument("--mode", choices=["step", "cold"], default="step"),
                              ap.add_argument("--repetitions", type=int, default=1)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

jax.config.update("jax_enable_compilation_cache", False)

BATCH, IN, WIDTH, OUT = 128, 64, 256, 10


def init(key, sizes=(IN, WIDTH, WIDTH, OUT)):
    """Linear layers as eqx.nn.Linear / kiln::nn::Linear: weight (out, in) and bias
    uniform in +-1/sqrt(in)."""
    params = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        key, kw, kb = jax.random.split(key, 3)
        lim = 1.0 / i ** 0.5
        params.append((jax.random.uniform(kw, (o, i), minval=-lim, maxval=lim),
                       jax.random.uniform(kb, (o,), minval=-lim, maxval=lim)))
    return params


def loss_fn(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w.T + b)
    w, b = params[-1]
    return optax.softmax_cross_entropy_with_integer_labels(h @ w.T + b, y).mean()


opt = optax.adam(1e-3)


@partial(jax.jit, donate_argnums=(0, 1))
def step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


params = init(jax.random.key(0))
opt_state = opt.init(params)
x = jax.random.normal(jax.random.key(1), (BATCH, IN))
y = jnp.arange(BATCH, dtype=jnp.int32) % OUT
jax.block_until_ready((params, opt_state, x, y))
result = {"case": "mlp_step", "mode": args.mode, **describe(jax)}

if args.mode == "cold":
    t0 = time.perf_counter()
    params, opt_state, loss = step(params, opt_state, x, y)
    loss.block_until_ready()
    result["first_call_s"] = time.perf_counter() - t0
else:
    state = [params, opt_state]

    def one_step():
        state[0], state[1], loss = step(state[0], state[1], x, y)
        return loss

    for _ in range(3):
        one_step().block_until_ready()
    result["step_s"] = [per_call_seconds(one_step, jax.block_until_ready)[0]
                        for _ in range(args.repetitions)]
    result["loss"] = float(one_step())
emit(result)
