// Activation functions of kiln::nn, as plain functions `Array f(const Array&)`
// so a module can store one as a static function-pointer leaf with a stable
// identity (seed 1): `Array (*activation)(const Array&) = nn::relu;`.
// Numerically stable forms (softmax subtracts the max, log_softmax uses
// log-sum-exp). relu, tanh and sigmoid are the DSL's own ops.
#pragma once

#include <cstdint>

#include "kiln/dsl/ops.hpp"

namespace kiln::nn {

using Activation = Array (*)(const Array&);

using kiln::relu;
using kiln::sigmoid;
using kiln::tanh;

Array identity(const Array& x);
// jax.nn.gelu(x, approximate=True): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Array gelu(const Array& x);
// jax.nn.gelu(x, approximate=False): x (1 + erf(x / sqrt 2)) / 2.
Array gelu_exact(const Array& x);
Array gelu(const Array& x, bool approximate);
// x * sigmoid(x) (jax.nn.silu).
Array silu(const Array& x);
// log(1 + exp(x)) without overflow (jax.nn.softplus: logaddexp(x, 0)); its
// gradient is sigmoid(x).
Array softplus(const Array& x);
// log(sigmoid(x)) = -softplus(-x) (jax.nn.log_sigmoid), finite for any finite x.
Array log_sigmoid(const Array& x);
// x for x > 0, alpha (exp(x) - 1) otherwise (jax.nn.elu, alpha 1 by default);
// the exp is taken of x where x <= 0 only, so no inf reaches the gradient.
Array elu(const Array& x, double alpha);
Array elu(const Array& x);
// x for x >= 0, slope x otherwise (jax.nn.leaky_relu, slope 0.01 by default).
Array leaky_relu(const Array& x, double negative_slope);
Array leaky_relu(const Array& x);
// Along the last axis (or `axis`), max-subtracted.
Array softmax(const Array& x);
Array softmax(const Array& x, std::int64_t axis);
Array log_softmax(const Array& x);
Array log_softmax(const Array& x, std::int64_t axis);
// The error function is the primitive kiln::erf (this was a composite of XLA's
// f32 rational approximation; a second erf here would make calls ambiguous).
using kiln::erf;

}  // namespace kiln::nn
