// kiln::random: JAX-compatible counter-based random numbers (threefry2x32),
// written with DSL ops on u32 arrays, so it runs eagerly, traces into programs
// (filter_jit, grad) and runs on every backend.
//
// Keys are u32 arrays of shape (2,), as jax.random's raw threefry keys: the same
// key always gives the same numbers; derive new keys with split or fold_in
// rather than reusing one. key, split, fold_in, bits, uniform on [0, 1),
// bernoulli, randint and permutation reproduce jax.random (default
// implementation, JAX >= 0.5, whose default is jax_threefry_partitionable on)
// bit for bit; uniform on other ranges and normal match to about 1 ulp (XLA
// fuses a multiply-add; the erfinv primitive is XLA's polynomial, evaluated
// with kiln's own log1p). See docs/DTYPES.md, "Random numbers".
#pragma once

#include <cstdint>

#include "kiln/runtime/array.hpp"

namespace kiln::random {

// jax.random.PRNGKey(seed): [0, seed].
Array key(std::uint32_t seed);
// n new keys, shape (n, 2) (jax.random.split).
Array split(const Array& key, std::int64_t n = 2);
// Key i of the (n, 2) result of split (keys[i] in JAX); negative i counts from
// the end; out of range is an IndexError.
Array subkey(const Array& keys, std::int64_t i);
// A new key from `key` and `data` (jax.random.fold_in).
Array fold_in(const Array& key, std::uint32_t data);
// Uniform raw u32 bits (jax.random.bits).
Array bits(const Array& key, const Shape& shape);
// Uniform in [minval, maxval) (jax.random.uniform). f32 only.
Array uniform(const Array& key, const Shape& shape, DType dtype = f32,
              double minval = 0.0, double maxval = 1.0);
// Standard normal (jax.random.normal). f32 only.
Array normal(const Array& key, const Shape& shape, DType dtype = f32);
// Standard Gumbel samples, -log(-log(u)) for u uniform on [tiny, 1)
// (jax.random.gumbel). f32 only.
Array gumbel(const Array& key, const Shape& shape, DType dtype = f32);
// Standard normal values truncated to the open interval (lower, upper), either
// bound may be infinite (jax.random.truncated_normal: the inverse CDF of a
// uniform between erf(lower / sqrt 2) and erf(upper / sqrt 2)). f32 only.
Array truncated_normal(const Array& key, double lower, double upper, const Shape& shape,
                       DType dtype = f32);
// Indices (i32) drawn from the categorical distributions whose unnormalised log
// probabilities lie along `axis` of `logits`: argmax(logits + gumbel) over axis,
// as jax.random.categorical (the result has logits' shape without `axis`).
// Logits of -inf are never drawn. f32 logits.
Array categorical(const Array& key, const Array& logits, std::int64_t axis = -1);
// bool, true with probability p (jax.random.bernoulli).
Array bernoulli(const Array& key, double p, const Shape& shape);
// Integers in [minval, maxval) of dtype i32 or u32 (jax.random.randint: 64 random
// bits per value reduced modulo the span, so the bias is ~span^2 / 2^64; bounds
// outside the dtype are clipped; maxval <= minval gives minval).
Array randint(const Array& key, const Shape& shape, std::int64_t minval,
              std::int64_t maxval, DType dtype = i32);
// A uniformly random permutation of 0..n-1, i32 (jax.random.permutation(key, n)).
// As JAX: rounds of a stable sort (argsort) by random u32 keys; O(n log n).
Array permutation(const Array& key, std::int64_t n);

// Inverse error function of f32 x in [-1, 1] (XLA's ErfInv32, Giles' single
// precision approximation); erfinv(+-1) = +-inf. kiln::erfinv (the primitive)
// restricted to f32, as the samplers use it.
Array erfinv(const Array& x);

}  // namespace kiln::random
