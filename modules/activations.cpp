// Activations as DSL composites; gradients come from the primitives' rules.
#include "kiln/modules/activations.hpp"

#include <array>
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

Array erf(const Array& x) {
  // XLA's ErfImpl32 (Eigen's generic_fast_erf_float): x P(x^2) / Q(x^2) on
  // [-4, 4], where erf is already +-1 in f32.
  static constexpr std::array<double, 7> kAlpha{
      -2.72614225801306e-10, 2.77068142495902e-08,  -2.10102402082508e-06,
      -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
      -1.60960333262415e-02};
  static constexpr std::array<double, 5> kBeta{
      -1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
      -7.37332916720468e-03, -1.42647390514189e-02};
  Array c = minimum(maximum(x, -4.0), 4.0);
  Array x2 = c * c;
  Array p = full_like(x2, kAlpha[0]);
  for (std::size_t i = 1; i < kAlpha.size(); ++i) p = p * x2 + kAlpha[i];
  Array q = full_like(x2, kBeta[0]);
  for (std::size_t i = 1; i < kBeta.size(); ++i) q = q * x2 + kBeta[i];
  return c * p / q;
}

}  // namespace kiln::nn
