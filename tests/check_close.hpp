// Elementwise closeness of two arrays (compared as f32): same shape, then one
// CHECK per element, relative tolerance `tol` (absolute near zero).
#pragma once

#include <doctest/doctest.h>

#include <kiln/kiln.hpp>
#include <vector>

namespace kiln::testing {

inline void check_close(const Array& got, const Array& want, double tol = 1e-5) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<float> g = astype(got, f32).to_vector<float>();
  const std::vector<float> w = astype(want, f32).to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element ", i);
    CHECK(g[i] == doctest::Approx(w[i]).epsilon(tol).scale(1.0));
  }
}

}  // namespace kiln::testing
