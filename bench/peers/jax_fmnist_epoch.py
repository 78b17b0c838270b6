#!/usr/bin/env python3
"""Case (c): Fashion-MNIST MLP training in JAX + Optax, mirroring
examples/train_fashion_mnist --model mlp: 784-256-256-10 ReLU, inputs x/255
normalised as (x - 0.2860) / 0.3530, softmax cross entropy, Adam lr 1e-3 with a
cosine decay over all steps, shuffled minibatches with the last partial batch
dropped (60000 / 128 -> 468 steps per epoch).

The same seeds as the example: the initialisation is eqx.nn.MLP's from the first
half of split(key(seed)), epoch e is shuffled by jax.random.permutation with
fold_in(second half, e). The step is jax.jit'ed with parameters and optimizer
state donated and compiled ahead of time (lower + compile, reported as
compile_seconds), so an epoch's train_seconds excludes compilation; as the kiln
example's, it runs from after the shuffle to the last step's results being ready
and includes the host-side batch gather and normalisation. Test accuracy is
measured after each epoch (not timed).
Data: the IDX gzip files of Debian's dataset-fashion-mnist package.
Prints the example's JSON shape.
"""
import gzip
import os
import time

from common import describe, emit, parse_args

args = parse_args(lambda ap: (
    ap.add_argument("--epochs", type=int, default=1),
    ap.add_argument("--batch-size", type=int, default=128),
    ap.add_argument("--seed", type=int, default=0),
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")))

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

jax.config.update("jax_enable_compilation_cache", False)

DEVICE = describe(jax)


def idx(name, offset):
    with gzip.open(os.path.join(args.data, name), "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


# Kept as bytes on the host; each minibatch is gathered and normalised on the host
# (as the kiln example's fmnist::gather does) and then handed to the step.
x_train, y_train = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784), idx(
    "train-labels-idx1-ubyte.gz", 8).astype(np.int32)
x_test, y_test = idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784), idx(
    "t10k-labels-idx1-ubyte.gz", 8).astype(np.int32)


def normalise(pixels):
    return (pixels.astype(np.float32) / np.float32(255) - np.float32(0.2860)) / np.float32(0.3530)


bs = args.batch_size
steps_per_epoch = len(x_train) // bs
total_steps = steps_per_epoch * args.epochs


def init(key):
    """eqx.nn.MLP(784, 10, 256, depth=2)'s initialisation (the kiln example's
    model), as a list of (weight, bias): jax.jit takes it whole."""
    mlp = eqx.nn.MLP(784, 10, 256, depth=2, key=key)
    return [(layer.weight, layer.bias) for layer in mlp.layers]


def logits_fn(params, x):
    h = x
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w.T + b)
    w, b = params[-1]
    return h @ w.T + b


def loss_fn(params, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(logits_fn(params, x), y).mean()


opt = optax.adam(optax.cosine_decay_schedule(1e-3, decay_steps=total_steps))


def step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@jax.jit
def accuracy(params, x, y):
    return jnp.mean(jnp.argmax(logits_fn(params, x), axis=1) == y)


# As the example: one key split into the initialisation key and the shuffle key;
# epoch e (from 0) is shuffled by jax.random.permutation(fold_in(shuffle_key, e)).
init_key, shuffle_key = jax.random.split(jax.random.key(args.seed), 2)
params = init(init_key)
opt_state = opt.init(params)
jax.block_until_ready((params, opt_state))
t0 = time.perf_counter()
compiled = jax.jit(step, donate_argnums=(0, 1)).lower(
    params, opt_state, jax.ShapeDtypeStruct((bs, 784), jnp.float32),
    jax.ShapeDtypeStruct((bs,), jnp.int32)).compile()
compile_seconds = time.perf_counter() - t0
x_test_f = normalise(x_test)

epochs = []
for epoch in range(args.epochs):
    order = np.asarray(jax.random.permutation(jax.random.fold_in(shuffle_key, epoch),
                                              len(x_train)))
    t0 = time.perf_counter()  # the example's clock also starts after the shuffle
    losses = []
    for s in range(steps_per_epoch):
        i = order[s * bs:(s + 1) * bs]
        params, opt_state, loss = compiled(params, opt_state, normalise(x_train[i]), y_train[i])
        losses.append(loss)
    jax.block_until_ready((params, losses[-1]))
    train_seconds = time.perf_counter() - t0
    epochs.append({"epoch": epoch + 1, "train_seconds": train_seconds, "steps": steps_per_epoch,
                   "train_loss": float(jnp.mean(jnp.stack(losses))),
                   "test_accuracy": float(accuracy(params, x_test_f, y_test))})
emit({"model": "mlp", "device": args.platform, "batch_size": bs, "compile_seconds": compile_seconds,
      "epochs": epochs, **DEVICE})
