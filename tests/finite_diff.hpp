// Central finite differences of a scalar function of several f64 arrays,
// compared element by element with the gradient kiln's grad computes.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <kiln/kiln.hpp>
#include <random>
#include <vector>

namespace kiln::testing {

// Uniform values in [-1, 1) of `dtype` (f64 by default), from `gen`.
inline Array uniform_array(std::mt19937& gen, const Shape& shape, DType dtype = f64) {
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(static_cast<std::size_t>(numel(shape)));
  for (double& e : v) e = d(gen);
  return astype(array<double>(v, shape), dtype);
}

// f(params) is a scalar f64 Array; checks grad(f)(params)[k][i] against
// (f(params + h e_ki) - f(params - h e_ki)) / 2h for every floating k and i
// (relative tolerance `tol`, absolute near zero); integer params must get None.
template <class F>
void check_finite_differences(F f, const std::vector<Array>& params, double tol = 1e-6,
                              double h = 1e-6) {
  const std::vector<Array> g = grad(f)(params);
  REQUIRE(g.size() == params.size());
  for (std::size_t which = 0; which < params.size(); ++which) {
    if (!is_inexact(params[which].dtype())) {
      CHECK(g[which].is_null());
      continue;
    }
    REQUIRE_FALSE(g[which].is_null());
    REQUIRE(g[which].shape() == params[which].shape());
    const std::vector<double> base = params[which].to_vector<double>();
    const std::vector<double> got = g[which].to_vector<double>();
    for (std::size_t i = 0; i < base.size(); ++i) {
      auto at = [&](double delta) {
        std::vector<double> v = base;
        v[i] += delta;
        std::vector<Array> p = params;
        p[which] = array<double>(v, params[which].shape());
        return f(p).template item<double>();
      };
      const double fd = (at(h) - at(-h)) / (2 * h);
      INFO("param " << which << " element " << i);
      CHECK(got[i] == doctest::Approx(fd).epsilon(tol).scale(1.0));
    }
  }
}

}  // namespace kiln::testing
