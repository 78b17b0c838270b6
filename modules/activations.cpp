// Activations as DSL composites; gradients come from the primitives' rules.
#include "kiln/modules/activations.hpp"

#include <cmath>
#include <numbers>

#include "kiln/dsl/autodiff.hpp"

namespace kiln::nn {

Array identity(const Array& x) { return x; }

Array gelu(const Array& x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  Array cdf = 0.5 * (1.0 + tanh(k * (x + 0.044715 * (x * x * x))));
  return x * cdf;
}

Array gelu_exact(const Array& x) {
  return x * (erf(x * std::numbers::sqrt2 / 2.0) + 1.0) / 2.0;
}

Array gelu(const Array& x, bool approximate) {
  return approximate ? gelu(x) : gelu_exact(x);
}

Array silu(const Array& x) { return x * sigmoid(x); }

Array softplus(const Array& x) { return logaddexp(x, zeros_like(x)); }

Array log_sigmoid(const Array& x) { return -softplus(-x); }

Array elu(const Array& x, double alpha) {
  const Array zero = zeros_like(x);
  const Array positive = x > zero;
  return where(positive, x, alpha * expm1(where(positive, zero, x)));  // jax.nn.elu's safe_x
}
Array elu(const Array& x) { return elu(x, 1.0); }

Array leaky_relu(const Array& x, double negative_slope) {
  return where(x >= zeros_like(x), x, negative_slope * x);
}
Array leaky_relu(const Array& x) { return leaky_relu(x, 0.01); }

Array softmax(const Array& x, std::int64_t axis) {
  // The shift does not change the result, so it carries no gradient (as JAX).
  Array e = exp(x - stop_gradient(max(x, axis, true)));
  return e / sum(e, axis, true);
}
Array softmax(const Array& x) { return softmax(x, -1); }

Array log_softmax(const Array& x, std::int64_t axis) {
  Array s = x - stop_gradient(max(x, axis, true));
  return s - log(sum(exp(s), axis, true));
}
Array log_softmax(const Array& x) { return log_softmax(x, -1); }

}  // namespace kiln::nn
