#!/usr/bin/env python3
"""Writes tests/golden/optax.txt: five steps of Optax optimizers (f32, CPU) on a
small two-leaf parameter tree, and schedule values. The C++ test
(tests/test_optim.cpp) runs the same optimizers with kiln::optim and compares
the updates (and final parameters) at relative 1e-5.

Re-run after changing a case here *and* in the C++ test:
  python3 -m venv /tmp/optaxenv && /tmp/optaxenv/bin/pip install jax optax numpy
  /tmp/optaxenv/bin/python tests/golden/make_optax_golden.py

Format, one record per line:  <case> <name> <dtype> <shape a,b,c or - for 0-d> <values...>
Per optimizer case: initial params param_w/param_b, the gradient of step t
grad<t>_w/grad<t>_b, Optax's update update<t>_w/update<t>_b, and the params
after the last step final_w/final_b; cases that track an EMA of the params
also write ema<t>_w/ema<t>_b after step t. Per schedule case: value<t> for
t = 0..11.
"""
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax

jax.config.update("jax_platforms", "cpu")
rng = np.random.default_rng(20260611)
STEPS = 5


def f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


params0 = {"w": f32(3, 4), "b": f32(4)}
grads = [{"w": f32(3, 4), "b": f32(4)} for _ in range(STEPS)]
# For clipping: global norms on both sides of max_norm = 1 (about 0.15 .. 7).
clip_scales = [0.1, 2.0, 0.3, 5.0, 1.0]
clip_grads = [{k: (v * np.float32(s)).astype(np.float32) for k, v in g.items()}
              for g, s in zip(grads, clip_scales)]

warmup_cosine = optax.warmup_cosine_decay_schedule(0.0, 0.1, 2, 5, 0.01)
optimizers = {
    "adam": (optax.adam(1e-2), grads),
    "adamw": (optax.adamw(1e-2, weight_decay=0.1), grads),
    "adamw_masked": (optax.adamw(1e-2, weight_decay=0.1, mask={"w": True, "b": False}),
                     grads),
    "sgd_momentum": (optax.sgd(0.1, momentum=0.9), grads),
    "sgd_nesterov": (optax.sgd(0.1, momentum=0.9, nesterov=True), grads),
    "rmsprop": (optax.rmsprop(1e-2), grads),
    "rmsprop_momentum": (optax.rmsprop(1e-2, decay=0.8, momentum=0.5), grads),
    "clip_sgd": (optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1)), clip_grads),
    "adam_warmup_cosine": (optax.adam(warmup_cosine), grads),
    "sgd_piecewise": (optax.sgd(optax.piecewise_constant_schedule(0.1, {2: 0.5, 4: 0.1})),
                      grads),
    # issue 18
    "lion": (optax.lion(1e-2), grads),
    "lion_decay": (optax.lion(1e-2, b1=0.8, b2=0.95, weight_decay=0.1), grads),
    "adagrad": (optax.adagrad(0.1), grads),
    "sgd_weight_decay": (optax.chain(optax.add_decayed_weights(0.05),
                                     optax.sgd(0.1, momentum=0.9)), grads),
    "clip_elementwise_sgd": (optax.chain(optax.clip(0.5), optax.sgd(0.1)), grads),
    "adam_linear_onecycle": (optax.adam(optax.linear_onecycle_schedule(5, 0.1)), grads),
    "sgd_cosine_onecycle": (optax.sgd(optax.cosine_onecycle_schedule(5, 0.1)), grads),
    "lamb": (optax.lamb(1e-2, weight_decay=0.01), grads),
    "adafactor": (optax.adafactor(1e-2, min_dim_size_to_factor=2), grads),
    "adafactor_momentum": (optax.adafactor(1e-2, min_dim_size_to_factor=2, momentum=0.9,
                                           weight_decay_rate=0.01, clipping_threshold=0.5,
                                           decay_rate=0.7), clip_grads),
    "multi_steps": (optax.MultiSteps(optax.adam(1e-2), every_k_schedule=2), grads),
    "multi_steps_sum": (optax.MultiSteps(optax.sgd(0.1, momentum=0.9), every_k_schedule=3,
                                         use_grad_mean=False), grads),
    "ema_sgd": (optax.chain(optax.ema(0.9), optax.sgd(0.1)), grads),
    "ema_nodebias_sgd": (optax.chain(optax.ema(0.8, debias=False), optax.sgd(0.1)), grads),
    "multi_transform": (optax.multi_transform(
        {"adam": optax.adam(1e-2), "sgd": optax.sgd(0.1, momentum=0.9)},
        {"w": "adam", "b": "sgd"}), grads),
    "inject_adamw": (optax.inject_hyperparams(optax.adamw)(
        learning_rate=1e-2, b1=0.9, b2=0.999, weight_decay=0.1), grads),
}
# Run-time hyperparameter changes before step t (inject_hyperparams): the
# C++ test makes the same changes with optim::set_hyperparameter.
hyperparam_changes = {
    "inject_adamw": {2: {"weight_decay": 0.3, "b1": 0.5}, 3: {"b2": 0.9, "learning_rate": 0.02}},
}
# Cases that also track an EMA of the params: optax.incremental_update with
# step size 1 - decay, starting from the initial params.
ema_params_decay = {"adagrad": 0.9}
schedules = {
    "sched_linear": optax.linear_schedule(1.0, 0.1, 6, 2),
    "sched_cosine": optax.cosine_decay_schedule(0.5, 8, alpha=0.1),
    "sched_cosine_exponent": optax.cosine_decay_schedule(0.5, 8, exponent=2.0),
    "sched_warmup_cosine": optax.warmup_cosine_decay_schedule(0.0, 1.0, 3, 10, 0.05),
    "sched_piecewise": optax.piecewise_constant_schedule(2.0, {3: 0.5, 7: 0.25}),
    "sched_join": optax.join_schedules(
        [optax.constant_schedule(0.3), optax.linear_schedule(0.3, 0.0, 4)], [5]),
    "sched_linear_onecycle": optax.linear_onecycle_schedule(10, 1.0),
    "sched_cosine_onecycle": optax.cosine_onecycle_schedule(9, 0.8, pct_start=0.4,
                                                            div_factor=10.0),
    "sched_piecewise_interpolate_linear": optax.piecewise_interpolate_schedule(
        "linear", 2.0, {2: 0.5, 5: 3.0, 6: 0.1}),
    "sched_piecewise_interpolate_cosine": optax.piecewise_interpolate_schedule(
        "cosine", 2.0, {3: 0.5, 4: 2.0, 9: 0.0}),
}


def record(case, name, arr):
    arr = np.asarray(arr)
    dtype = {np.dtype(np.float32): "f32", np.dtype(np.int32): "i32"}[arr.dtype]
    shape = ",".join(str(d) for d in arr.shape) or "-"  # "-": a 0-d array
    values = " ".join(repr(float(v)) if dtype == "f32" else str(int(v))
                      for v in arr.reshape(-1))
    return f"{case} {name} {dtype} {shape} {values}"


lines = []
for case, (opt, gs) in optimizers.items():
    params = jax.tree.map(jnp.asarray, params0)
    state = opt.init(params)
    for k in ("w", "b"):
        lines.append(record(case, f"param_{k}", params0[k]))
    update = jax.jit(opt.update)
    ema = params
    for t, g in enumerate(gs):
        for name, value in hyperparam_changes.get(case, {}).get(t, {}).items():
            state.hyperparams[name] = jnp.asarray(value, jnp.float32)
        updates, state = update(jax.tree.map(jnp.asarray, g), state, params)
        params = optax.apply_updates(params, updates)
        for k in ("w", "b"):
            lines.append(record(case, f"grad{t}_{k}", g[k]))
            lines.append(record(case, f"update{t}_{k}", updates[k]))
        if case in ema_params_decay:
            ema = optax.incremental_update(params, ema, 1.0 - ema_params_decay[case])
            for k in ("w", "b"):
                lines.append(record(case, f"ema{t}_{k}", ema[k]))
    for k in ("w", "b"):
        lines.append(record(case, f"final_{k}", params[k]))

for case, fn in schedules.items():
    for t in range(12):
        lines.append(record(case, f"value{t}",
                            np.asarray(fn(jnp.asarray(t, jnp.int32)), np.float32)))

out = pathlib.Path(__file__).with_name("optax.txt")
out.write_text(f"# generated by make_optax_golden.py with optax {optax.__version__}, "
               f"jax {jax.__version__}\n" + "\n".join(lines) + "\n")
print(f"wrote {out} ({len(lines)} records)")
