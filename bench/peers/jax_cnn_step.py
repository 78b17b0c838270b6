#!/usr/bin/env python3
"""Case (h): bench/cnn_step's small Fashion-MNIST CNN training step as Equinox +
Optax, eqx.filter_jit'd, with the model and optimizer state donated.

  x (128, 1, 28, 28), NCHW as kiln's and LibTorch's -> eqx.nn.Conv2d(1, 32, 3,
  padding=1) -> relu -> eqx.nn.MaxPool2d(2, stride=2) -> eqx.nn.Conv2d(32, 64, 3,
  padding=1) -> relu -> eqx.nn.MaxPool2d(2, stride=2) -> flatten ->
  eqx.nn.Linear(64 * 7 * 7, 10); softmax cross entropy with integer labels (mean),
  one optax.adam(1e-3) step. Equinox's layers take one image (C, H, W): the
  model is jax.vmap'd over the batch inside the loss.

The batch is cnn_step's: x[j] = (j % 251) / 251 over the flat index j, label
i % 10 for image i; the initial weights come from jax.random.key(0) (Equinox's
default initialisation, uniform in +-1/sqrt(fan_in) as kiln::nn's and
LibTorch's). Timing as cnn_step's: 3 warm-up steps (the first compiles), then
--steps steps, each timed up to its loss read on the host (float(loss)); prints
the median in ms and the last loss as one JSON object.
"""
import statistics
import time

from common import describe, emit, parse_args

args = parse_args(lambda ap: ap.add_argument("--steps", type=int, default=20))

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

jax.config.update("jax_enable_compilation_cache", False)

BATCH, WARMUP = 128, 3


class Cnn(eqx.Module):
    conv1: eqx.nn.Conv2d
    conv2: eqx.nn.Conv2d
    head: eqx.nn.Linear
    pool: eqx.nn.MaxPool2d

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.conv1 = eqx.nn.Conv2d(1, 32, 3, padding=1, key=k1)
        self.conv2 = eqx.nn.Conv2d(32, 64, 3, padding=1, key=k2)
        self.head = eqx.nn.Linear(64 * 7 * 7, 10, key=k3)
        self.pool = eqx.nn.MaxPool2d(2, stride=2)

    def __call__(self, x):  # one image (1, 28, 28)
        h = self.pool(jax.nn.relu(self.conv1(x)))  # (32, 14, 14)
        h = self.pool(jax.nn.relu(self.conv2(h)))  # (64, 7, 7)
        return self.head(h.reshape(-1))


def loss_fn(model, x, y):
    logits = jax.vmap(model)(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


opt = optax.adam(1e-3)


# The batch is the first argument, so not donated; the model and state are.
@eqx.filter_jit(donate="all-except-first")
def step(batch, model, opt_state):
    x, y = batch
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
    updates, opt_state = opt.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


model = Cnn(jax.random.key(0))
opt_state = opt.init(eqx.filter(model, eqx.is_array))
x = (jnp.arange(BATCH * 28 * 28, dtype=jnp.int32) % 251).astype(jnp.float32) / 251.0
x = x.reshape(BATCH, 1, 28, 28)
y = jnp.arange(BATCH, dtype=jnp.int32) % 10
jax.block_until_ready((eqx.filter(model, eqx.is_array), opt_state, x, y))
result = {"case": "cnn_step", "impl": "jax", "mode": "eqx.filter_jit", **describe(jax)}

ms = []
loss = None
for i in range(WARMUP + args.steps):
    t0 = time.perf_counter()
    model, opt_state, loss = step((x, y), model, opt_state)
    loss = float(loss)  # waits for the step
    t = (time.perf_counter() - t0) * 1e3
    if i == 0:
        result["first_step_ms"] = t
    if i >= WARMUP:
        ms.append(t)
result.update({"batch": BATCH, "warmup": WARMUP, "steps": args.steps,
               "median_step_ms": statistics.median(ms) if ms else 0.0, "final_loss": loss})
emit(result)
