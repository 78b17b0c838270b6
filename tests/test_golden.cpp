// Values and gradients of a fixed set of functions against JAX golden values
// (tests/golden/autodiff.txt, written by tests/golden/make_golden.py). f32, relative
// tolerance 1e-5. The functions mirror make_golden.py line for line.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <kiln/kiln.hpp>
#include <limits>
#include <map>

#include "golden_file.hpp"

using namespace kiln;

namespace {

using Record = std::map<std::string, Array>;

std::map<std::string, Record> load_golden() {
  std::map<std::string, Record> out;
  for (const auto& [case_name, records] : testing::load_golden_file("autodiff.txt")) {
    for (const auto& [name, r] : records) {
      if (r.dtype == "f32") {
        out[case_name][name] = array<float>(std::vector<float>(r.values.begin(), r.values.end()), r.shape);
      } else {
        out[case_name][name] =
            array<std::int32_t>(std::vector<std::int32_t>(r.values.begin(), r.values.end()), r.shape);
      }
    }
  }
  return out;
}

const std::map<std::string, Record>& golden() {
  static const auto g = load_golden();
  return g;
}

Array log_softmax(const Array& z) {
  Array s = z - max(z, -1, true);
  return s - log(sum(exp(s), -1, true));
}

void check_close(const Array& got, const Array& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": kiln " << g[i] << " vs jax " << w[i]);
    if (std::isnan(w[i])) {
      CHECK(std::isnan(g[i]));
    } else {
      CHECK(std::abs(g[i] - w[i]) <= 1e-5f * std::abs(w[i]) + 1e-6f);
    }
  }
}

using Fn = std::function<Array(const std::vector<Array>& diff, const std::vector<Array>& rest)>;

void check_case(const std::string& name, int n_diff, const Fn& f) {
  const Record& r = golden().at(name);
  std::vector<Array> diff, rest;
  for (int i = 0; r.count("in_" + std::to_string(i)); ++i) {
    (i < n_diff ? diff : rest).push_back(r.at("in_" + std::to_string(i)));
  }
  auto [value, grads] = value_and_grad(f)(diff, rest);
  check_close(value, r.at("value"), name + " value");
  for (int i = 0; i < n_diff; ++i) {
    check_close(grads[i], r.at("grad_" + std::to_string(i)), name + " grad_" + std::to_string(i));
  }
}

}  // namespace

TEST_CASE("MLP softmax cross-entropy with integer labels matches JAX") {
  check_case("mlp_xent", 4, [](const std::vector<Array>& p, const std::vector<Array>& r) {
    Array h = tanh(matmul(r[0], p[0]) + p[1]);
    Array logp = log_softmax(matmul(h, p[2]) + p[3]);
    return -mean(take_along_axis(logp, expand_dims(r[1], 1), 1));
  });
}

TEST_CASE("softmax cross-entropy with one-hot targets matches JAX") {
  check_case("onehot_xent", 1, [](const std::vector<Array>& p, const std::vector<Array>& r) {
    return -mean(sum(r[0] * log_softmax(p[0]), -1));
  });
}

TEST_CASE("a layer-norm-like expression matches JAX") {
  check_case("layer_norm", 3, [](const std::vector<Array>& p, const std::vector<Array>& r) {
    Array mu = mean(p[0], -1, true);
    Array d = p[0] - mu;
    Array var = mean(d * d, -1, true);
    Array y = d / sqrt(var + 1e-5f) * p[1] + p[2];
    return sum(y * r[0]);
  });
}

TEST_CASE("broadcasting and reductions match JAX") {
  check_case("broadcast_reduce", 2, [](const std::vector<Array>& p, const std::vector<Array>&) {
    Array prod = expand_dims(p[0], 1) * expand_dims(p[1], 0);  // (3, 4, 5)
    return sum(max(prod, 1)) + mean(min(prod, {0, 2})) +
           sum(sigmoid(p[0]) / (1.0f + slice_axis(p[1], 0, 0, 1)));
  });
}

TEST_CASE("a matmul chain matches JAX") {
  check_case("matmul_chain", 3, [](const std::vector<Array>& p, const std::vector<Array>&) {
    Array ab = matmul(p[0], p[1]);
    return sum(matmul(relu(ab), p[2])) + sum(exp(-(ab * ab)));
  });
}

TEST_CASE("norm of every ord, and its gradient at 0, match jnp.linalg.vector_norm") {
  const double inf = std::numeric_limits<double>::infinity();
  check_case("norms", 2, [&](const std::vector<Array>& p, const std::vector<Array>&) {
    const Array& x = p[0];
    const Array& m = p[1];
    return norm(x) + sum(norm(m, 2, 1, true)) + norm(x, 1) + norm(x, inf) + norm(m, -inf) +
           norm(x, 3) + norm(m, 0) + norm(m);
  });
  check_case("norm_at_zero", 2, [&](const std::vector<Array>& p, const std::vector<Array>&) {
    return norm(p[0]) + norm(p[1], 1) + norm(p[1], inf);
  });
  CHECK_THROWS_WITH_AS(norm(array<std::int32_t>({1, 2}, {2})),
                       doctest::Contains("[norm] requires a floating dtype, got i32"), DTypeError);
  CHECK_THROWS_WITH_AS(norm(array<float>({1, 2}, {2}), std::nan("")), "[norm] ord is NaN; give 2, 1, inf, -inf, 0 or another number",
                       ValueError);
}
