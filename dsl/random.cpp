// kiln::random: threefry2x32 and the samplers built on it, in DSL ops, following
// jax/_src/random/threefry2x32.py and jax/_src/random/core.py (JAX 0.10) step for
// step so the results agree bit for bit (tests/test_random.cpp checks them
// against tests/golden/random.txt).
#include "kiln/dsl/random.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::random {
namespace {

using Pair = std::pair<Array, Array>;

void check_key(std::string_view op, const Array& key) {
  detail::check_not_none(op, key, "key");
  if (key.dtype() != DType::kU32 || key.shape() != Shape{2}) {
    throw DTypeError(detail::str_cat(
        "[", op, "] a key is a u32 array of shape (2,), got ", name(key.dtype()),
        " of shape ", to_string(key.shape()),
        "; make one with random::key(seed) or take a row of random::split"));
  }
}

void check_f32(std::string_view op, DType dtype) {
  if (dtype != DType::kF32) {
    throw DTypeError(detail::str_cat("[", op, "] supports f32 only, got ",
                                     name(dtype)));
  }
}

Array u32_scalar(std::uint32_t v) { return full(Shape{}, v, u32); }

// The two words of a key as 0-d arrays, broadcast against the counters.
Pair key_words(const Array& key) {
  return {reshape(slice_axis(key, 0, 0, 1), Shape{}),
          reshape(slice_axis(key, 0, 1, 2), Shape{})};
}

Array rotate_left(const Array& x, std::uint32_t d) {
  return bitwise_or(shift_left(x, d), shift_right_logical(x, 32u - d));
}

// The Threefry-2x32 block cipher (20 rounds) of the counter pair (x0, x1) under
// the key (k0, k1): JAX's unrolled _threefry2x32_lowering.
Pair threefry2x32(const Array& k0, const Array& k1, Array x0, Array x1) {
  static constexpr std::uint32_t kRotations[2][4] = {{13, 15, 26, 6},
                                                     {17, 29, 16, 24}};
  const Array ks[3] = {k0, k1, bitwise_xor(bitwise_xor(k0, k1), 0x1BD11BDAu)};
  x0 = x0 + ks[0];
  x1 = x1 + ks[1];
  for (std::uint32_t i = 0; i < 5; ++i) {
    for (std::uint32_t r : kRotations[i % 2]) {
      x0 = x0 + x1;
      x1 = bitwise_xor(x0, rotate_left(x1, r));
    }
    x0 = x0 + ks[(i + 1) % 3];
    x1 = x1 + (ks[(i + 2) % 3] + (i + 1));
  }
  return {std::move(x0), std::move(x1)};
}

// threefry2x32 of the 64-bit counters 0..n-1 as (high, low) u32 words: JAX's
// iota_2x32_shape, whose high words are 0 below 2^32 elements.
Pair hash_iota(const Array& key, std::string_view op, std::int64_t n) {
  if (n >= (std::int64_t{1} << 32)) {
    throw ValueError(detail::str_cat("[", op, "] ", n,
                                     " values is more than kiln supports "
                                     "(2^32 - 1 per call)"));
  }
  auto [k0, k1] = key_words(key);
  return threefry2x32(k0, k1, u32_scalar(0),
                      arange(0.0, static_cast<double>(n), 1.0, u32));
}

// a mod s for u32 arrays (s > 0), as XLA's rem; a mod 0 == a, as XLA's.
Array rem(const Array& a, std::uint32_t s) {
  if (s == 0) return a;
  return a - (a / s) * s;
}

}  // namespace

Array key(std::uint32_t seed) { return array<std::uint32_t>({0u, seed}); }

Array split(const Array& key, std::int64_t n) {
  check_key("random.split", key);
  if (n < 0) {
    throw ValueError(
        detail::str_cat("[random.split] n must be >= 0, got ", n));
  }
  // _threefry_split_foldlike: key i is the (high, low) hash of counter i.
  auto [b0, b1] = hash_iota(key, "random.split", n);
  return concatenate({reshape(b0, Shape{n, 1}), reshape(b1, Shape{n, 1})}, 1);
}

Array subkey(const Array& keys, std::int64_t i) {
  detail::check_not_none("random.subkey", keys, "keys");
  if (keys.dtype() != DType::kU32 || keys.ndim() != 2 || keys.shape()[1] != 2) {
    throw DTypeError(detail::str_cat("[random.subkey] keys are a u32 array of shape (n, 2) ",
                                     "(random::split), got ", name(keys.dtype()), " of shape ",
                                     to_string(keys.shape())));
  }
  const std::int64_t n = keys.shape()[0];
  const std::int64_t at = i < 0 ? i + n : i;
  if (at < 0 || at >= n) {
    throw IndexError(detail::str_cat("[random.subkey] index ", i, " is out of range for ", n,
                                     " keys"));
  }
  return reshape(slice_axis(keys, 0, at, at + 1), Shape{2});
}

Array fold_in(const Array& key, std::uint32_t data) {
  check_key("random.fold_in", key);
  // threefry_2x32(key, threefry_seed(data)): the one counter pair (0, data).
  auto [k0, k1] = key_words(key);
  auto [y0, y1] = threefry2x32(k0, k1, u32_scalar(0), u32_scalar(data));
  return concatenate({reshape(y0, Shape{1}), reshape(y1, Shape{1})}, 0);
}

Array bits(const Array& key, const Shape& shape) {
  check_key("random.bits", key);
  const std::int64_t n = numel(shape);
  if (n == 0) return zeros(shape, u32);
  // _threefry_random_bits_partitionable: the two output words xor-ed.
  auto [b0, b1] = hash_iota(key, "random.bits", n);
  return reshape(bitwise_xor(b0, b1), shape);
}

Array uniform(const Array& key, const Shape& shape, DType dtype, double minval,
              double maxval) {
  check_key("random.uniform", key);
  check_f32("random.uniform", dtype);
  // 23 random mantissa bits under the exponent of 1.0 give [1, 2); minus 1,
  // scaled. The span is computed in f32, as JAX does.
  const auto lo = static_cast<float>(minval);
  const auto hi = static_cast<float>(maxval);
  const float span = hi - lo;
  Array mantissa = shift_right_logical(bits(key, shape), 32u - 23u);
  Array one_to_two = bitcast(bitwise_or(mantissa, 0x3F800000u), f32);
  Array unit = one_to_two - 1.0;
  return maximum(unit * static_cast<double>(span) + static_cast<double>(lo),
                 static_cast<double>(lo));
}

Array erfinv(const Array& x) {
  detail::check_not_none("random.erfinv", x, "argument 1");
  check_f32("random.erfinv", x.dtype());
  // The erfinv primitive computes f32 as XLA's ErfInv32 does, step for step
  // (dsl/unary_math.hpp), so it gives the bits the composite of these ops gave
  // and jax.random's samplers stay reproduced (tests/test_random.cpp).
  return kiln::erfinv(x);
}

Array normal(const Array& key, const Shape& shape, DType dtype) {
  check_key("random.normal", key);
  check_f32("random.normal", dtype);
  // Uniform on (-1, 1) (open at -1 so erfinv stays finite), then the inverse CDF.
  const float lo = std::nextafter(-1.0f, 0.0f);
  Array u = uniform(key, shape, f32, lo, 1.0);
  return kiln::erfinv(u) * static_cast<double>(static_cast<float>(std::sqrt(2.0)));
}

Array gumbel(const Array& key, const Shape& shape, DType dtype) {
  check_key("random.gumbel", key);
  check_f32("random.gumbel", dtype);
  const Array u = uniform(key, shape, dtype, std::numeric_limits<float>::min(), 1.0);
  return -log(-log(u));
}

Array truncated_normal(const Array& key, double lower, double upper, const Shape& shape,
                       DType dtype) {
  check_key("random.truncated_normal", key);
  check_f32("random.truncated_normal", dtype);
  if (!(lower < upper)) {
    throw ValueError(detail::str_cat("[random.truncated_normal] needs lower < upper, got lower=",
                                     lower, " upper=", upper));
  }
  // In f32, as JAX computes it; the bounds' erf on the host (they are static).
  const auto sqrt2 = static_cast<float>(std::sqrt(2.0));
  const auto lo = static_cast<float>(lower);
  const auto hi = static_cast<float>(upper);
  const Array u = uniform(key, shape, f32, std::erf(lo / sqrt2), std::erf(hi / sqrt2));
  const float inf = std::numeric_limits<float>::infinity();
  return clip(kiln::erfinv(u) * static_cast<double>(sqrt2), std::nextafter(lo, inf),
              std::nextafter(hi, -inf));
}

Array categorical(const Array& key, const Array& logits, std::int64_t axis) {
  check_key("random.categorical", key);
  detail::check_not_none("random.categorical", logits, "logits");
  check_f32("random.categorical", logits.dtype());
  const std::int64_t nd = logits.ndim();
  const std::int64_t at = axis < 0 ? axis + nd : axis;
  if (nd == 0 || at < 0 || at >= nd) {
    throw ValueError(detail::str_cat("[random.categorical] axis ", axis,
                                     " is out of range for logits of shape ",
                                     to_string(logits.shape())));
  }
  return argmax(gumbel(key, logits.shape(), logits.dtype()) + logits, at);
}

Array bernoulli(const Array& key, double p, const Shape& shape) {
  check_key("random.bernoulli", key);
  // p is compared as f32, as JAX compares a Python float with f32 uniforms.
  return uniform(key, shape) < static_cast<double>(static_cast<float>(p));
}

Array randint(const Array& key, const Shape& shape, std::int64_t minval,
              std::int64_t maxval, DType dtype) {
  check_key("random.randint", key);
  if (dtype != DType::kI32 && dtype != DType::kU32) {
    throw DTypeError(detail::str_cat(
        "[random.randint] requires an integer dtype (i32 or u32), got ",
        name(dtype)));
  }
  // JAX's _randint: bounds clipped to the dtype; the span is computed on the
  // host (the bounds are static here) with JAX's wrap-around and corner cases.
  const std::int64_t dmin =
      dtype == DType::kI32 ? std::numeric_limits<std::int32_t>::min() : 0;
  const std::int64_t dmax = dtype == DType::kI32
                                ? std::numeric_limits<std::int32_t>::max()
                                : std::numeric_limits<std::uint32_t>::max();
  const bool maxval_out_of_range = maxval > dmax;
  minval = std::clamp(minval, dmin, dmax);
  maxval = std::clamp(maxval, dmin, dmax);
  auto span = static_cast<std::uint32_t>(maxval - minval);
  if (maxval <= minval) span = 1;
  if (maxval_out_of_range && maxval > minval) span += 1;  // may wrap to 0
  // 2^32 mod span without 64-bit arithmetic, as JAX computes it (u32 wraps).
  std::uint32_t multiplier = span == 0 ? 65536u : 65536u % span;
  multiplier = multiplier * multiplier;
  if (span != 0) multiplier %= span;

  Array keys = random::split(key, 2);  // qualified: ADL also finds kiln::split
  Array higher = bits(reshape(slice_axis(keys, 0, 0, 1), Shape{2}), shape);
  Array lower = bits(reshape(slice_axis(keys, 0, 1, 2), Shape{2}), shape);
  Array offset =
      rem(rem(higher, span) * multiplier + rem(lower, span), span);
  // Converting and adding wrap modulo 2^32, as XLA's convert and add do.
  Array out = astype(offset, dtype);
  if (dtype == DType::kI32) {
    return out + static_cast<std::int32_t>(minval);
  }
  return out + static_cast<std::uint32_t>(minval);
}

Array permutation(const Array& key, std::int64_t n) {
  check_key("random.permutation", key);
  if (n < 0) {
    throw ValueError(
        detail::str_cat("[random.permutation] n must be >= 0, got ", n));
  }
  // JAX's _shuffle: enough rounds of sorting by fresh random u32 keys that all
  // sort keys are distinct with high probability (exponent 3).
  const int rounds = static_cast<int>(std::ceil(
      3.0 * std::log(static_cast<double>(std::max<std::int64_t>(1, n))) /
      std::log(static_cast<double>(std::numeric_limits<std::uint32_t>::max()))));
  Array x = arange(0.0, static_cast<double>(n), 1.0, i32);
  if (n == 0) return x;
  Array k = key;
  for (int round = 0; round < rounds; ++round) {
    Array keys = random::split(k, 2);
    k = reshape(slice_axis(keys, 0, 0, 1), Shape{2});
    Array sort_keys = bits(reshape(slice_axis(keys, 0, 1, 2), Shape{2}), {n});
    // A stable ascending sort by the u32 keys, as JAX's sort_key_val.
    Array order = argsort(sort_keys);
    x = take(x, order, 0);
  }
  return x;
}

}  // namespace kiln::random
