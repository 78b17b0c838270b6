// grad / value_and_grad: every primitive's vjp against central finite differences
// (f64 on the CPU, fresh random inputs each run), tree semantics of the gradient,
// higher-order gradients, and the error paths.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <kiln/dsl/autodiff.hpp>
#include <kiln/kiln.hpp>
#include <random>

#include "finite_diff.hpp"

using namespace kiln;

namespace {

std::mt19937& rng() {
  static std::mt19937 gen = [] {
    const unsigned seed = std::random_device{}();
    MESSAGE("finite-difference seed: " << seed);
    return std::mt19937(seed);
  }();
  return gen;
}

// Uniform in [lo, hi), optionally kept away from 0 by `gap` (for abs/relu kinks).
Array random_array(const Shape& shape, double lo = -1, double hi = 1, double gap = 0) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(numel(shape));
  for (double& x : v) {
    do x = d(rng());
    while (std::abs(x) < gap);
  }
  return array<double>(v, shape);
}

// Checks grad(f) at x against central differences of f, elementwise.
void check_fd(const std::function<Array(const std::vector<Array>&)>& f,
              const std::vector<Array>& x, double tol = 1e-6, double eps = 1e-6) {
  testing::check_finite_differences(f, x, tol, eps);
}

// sum(out * w) with a fixed random w: a scalar whose gradient exercises every
// element of out with a different weight.
Array weighted(const Array& out) {
  static std::map<std::string, Array> weights;
  const std::string key = to_string(out.shape());
  if (!weights.count(key)) weights[key] = random_array(out.shape());
  return sum(out * astype(weights[key], out.dtype()));
}

}  // namespace

TEST_CASE("vjp of every unary primitive matches finite differences") {
  using U = Array (*)(const Array&);
  const std::vector<std::pair<const char*, U>> ops = {
      {"neg", neg}, {"abs", abs}, {"exp", exp}, {"tanh", tanh}, {"sigmoid", sigmoid},
      {"relu", relu}};
  for (auto [name, op] : ops) {
    SUBCASE(name) {
      check_fd([op](const std::vector<Array>& x) { return weighted(op(x[0])); },
               {random_array({2, 3}, -2, 2, 0.05)});
    }
  }
  SUBCASE("log, sqrt, rsqrt on positive inputs") {
    for (U op : {static_cast<U>(log), static_cast<U>(sqrt), static_cast<U>(rsqrt)}) {
      check_fd([op](const std::vector<Array>& x) { return weighted(op(x[0])); },
               {random_array({3, 2}, 0.5, 2)});
    }
  }
}

TEST_CASE("abs's gradient at its kink is JAX's: +1 at 0 and -0, -1 below, -1 for NaN") {
  // jax.lax abs jvp: select(x >= 0, g, -g).
  const Array x = array<float>({-2.0f, -0.0f, 0.0f, 3.0f, std::nanf("")});
  const std::vector<float> g = grad([](const Array& a) { return sum(abs(a)); })(x).to_vector<float>();
  CHECK(g == std::vector<float>{-1, 1, 1, 1, -1});
}

TEST_CASE("vjp of binary primitives sums over broadcast dimensions") {
  using B = Array (*)(const Array&, const Array&);
  const std::vector<std::pair<const char*, B>> ops = {
      {"add", add}, {"subtract", subtract}, {"multiply", multiply}, {"divide", divide},
      {"maximum", maximum}, {"minimum", minimum}};
  for (auto [name, op] : ops) {
    SUBCASE(name) {
      check_fd([op](const std::vector<Array>& x) { return weighted(op(x[0], x[1])); },
               {random_array({2, 3}, 0.5, 2), random_array({3}, 0.5, 2)});
      check_fd([op](const std::vector<Array>& x) { return weighted(op(x[0], x[1])); },
               {random_array({2, 1}, 0.5, 2), random_array({1, 3}, 0.5, 2)});
    }
  }
  SUBCASE("power") {
    check_fd([](const std::vector<Array>& x) { return weighted(power(x[0], x[1])); },
             {random_array({2, 3}, 0.5, 2), random_array({2, 3}, -1, 2)});
  }
}

TEST_CASE("vjp of reductions, matmul and where") {
  SUBCASE("sum over axes, keepdims") {
    check_fd([](const std::vector<Array>& x) { return weighted(sum(x[0], {0, 2}, true)); },
             {random_array({2, 3, 4})});
  }
  SUBCASE("mean") {
    check_fd([](const std::vector<Array>& x) { return weighted(mean(x[0], 1)); },
             {random_array({3, 4})});
  }
  SUBCASE("max and min (no ties)") {
    check_fd([](const std::vector<Array>& x) { return weighted(max(x[0], 1)); },
             {random_array({3, 4})});
    check_fd([](const std::vector<Array>& x) { return weighted(min(x[0])); }, {random_array({3, 4})});
  }
  SUBCASE("batched matmul with broadcast batch dims and 1-D operands") {
    check_fd([](const std::vector<Array>& x) { return weighted(matmul(x[0], x[1])); },
             {random_array({2, 3, 4}), random_array({4, 5})});
    check_fd([](const std::vector<Array>& x) { return weighted(matmul(x[0], x[1])); },
             {random_array({4}), random_array({2, 4, 3})});
  }
  SUBCASE("where") {
    Array cond = array<bool>({true, false, true}, {3});
    check_fd([cond](const std::vector<Array>& x) { return weighted(where(cond, x[0], x[1])); },
             {random_array({2, 3}), random_array({3})});
  }
}

TEST_CASE("vjp of layout and indexing primitives") {
  SUBCASE("reshape, transpose, broadcast_to") {
    check_fd([](const std::vector<Array>& x) {
      return weighted(broadcast_to(transpose(reshape(x[0], {3, 2}), {1, 0}), {4, 2, 3}));
    }, {random_array({6})});
  }
  SUBCASE("concatenate") {
    check_fd([](const std::vector<Array>& x) { return weighted(concatenate({x[0], x[1]}, 1)); },
             {random_array({2, 1}), random_array({2, 3})});
  }
  SUBCASE("slice with steps and offsets on two axes") {
    check_fd([](const std::vector<Array>& x) {
      return weighted(slice(x[0], Shape{1, 0}, Shape{5, 3}, Shape{2, 2}));
    }, {random_array({6, 4})});
  }
  SUBCASE("take with repeated and negative indices") {
    Array idx = array<std::int32_t>({0, 2, -1, 0}, {2, 2});
    check_fd([idx](const std::vector<Array>& x) { return weighted(take(x[0], idx, 1)); },
             {random_array({2, 3, 2})});
  }
  SUBCASE("take_along_axis") {
    Array idx = array<std::int32_t>({1, 0, 2, 2}, {2, 2});
    check_fd([idx](const std::vector<Array>& x) {
      return weighted(take_along_axis(x[0], idx, 1));
    }, {random_array({2, 3})});
  }
  SUBCASE("astype between floating dtypes") {
    check_fd([](const std::vector<Array>& x) {
      return astype(weighted(astype(x[0], f32)), f64);
    }, {random_array({3})}, 1e-3, 1e-2);  // f32 in the middle: a step f32 can resolve
  }
}

namespace {

struct Layer {
  Array weight;
  Array bias;
  Array counts;  // i32: no gradient
  Array (*activation)(const Array&) = tanh;
  KILN_MODULE(Layer, weight, bias, counts, activation);
};

Array layer_loss(const Layer& l, const Array& x) {
  return sum(l.activation(matmul(x, l.weight) + l.bias));
}

}  // namespace

TEST_CASE("grad returns the argument's tree with None at integer, None and static leaves") {
  Layer l{array<float>({0.1f, -0.2f, 0.3f, 0.4f}, {2, 2}), Array(),
          array<std::int32_t>({1, 2}), tanh};
  Array x = array<float>({1, 2}, {1, 2});
  auto loss = [](const Layer& m, const Array& in) { return sum(m.activation(matmul(in, m.weight))); };
  Layer g = grad(loss)(l, x);
  CHECK(g.bias.is_null());
  CHECK(g.counts.is_null());
  CHECK(static_cast<bool>(g.activation == l.activation));
  CHECK(tree::paths(g) == std::vector<std::string>{"weight"});
  // d/dW sum(tanh(x W)) = x^T (1 - tanh(xW)^2)
  const float h0 = std::tanh(1 * 0.1f + 2 * 0.3f), h1 = std::tanh(1 * -0.2f + 2 * 0.4f);
  std::vector<float> expect{1 * (1 - h0 * h0), 1 * (1 - h1 * h1), 2 * (1 - h0 * h0),
                            2 * (1 - h1 * h1)};
  std::vector<float> got = g.weight.to_vector<float>();
  for (int i = 0; i < 4; ++i) CHECK(got[i] == doctest::Approx(expect[i]));

  l.bias = zeros({2});
  Layer g2 = grad(layer_loss)(l, x);
  CHECK(tree::paths(g2) == std::vector<std::string>{"weight", "bias"});
}

TEST_CASE("value_and_grad returns the value, and auxiliary outputs after the loss") {
  auto f = [](const Array& x) { return std::pair{sum(x * x), x * 2.0f}; };
  auto [value, g] = value_and_grad(f)(array<float>({1, 2, 3}));
  CHECK(value.first.item<float>() == 14.0f);
  CHECK(value.second.to_vector<float>() == std::vector<float>{2, 4, 6});
  CHECK(g.to_vector<float>() == std::vector<float>{2, 4, 6});
}

TEST_CASE("grad of grad gives second derivatives") {
  auto f = [](const Array& x) { return sum(x * x * x); };
  auto df = [f](const Array& x) { return sum(grad(f)(x)); };  // sum(3x^2)
  Array x = array<float>({1, -2, 0.5f});
  CHECK(grad(f)(x).to_vector<float>() == std::vector<float>{3, 12, 0.75f});
  CHECK(grad(df)(x).to_vector<float>() == std::vector<float>{6, -12, 3});
}

TEST_CASE("stop_gradient blocks the gradient, and unused inputs get zeros") {
  auto f = [](const std::vector<Array>& x) { return sum(x[0] * stop_gradient(x[0])); };
  std::vector<Array> g = grad(f)(std::vector<Array>{array<float>({3, 4}), array<float>({1})});
  CHECK(g[0].to_vector<float>() == std::vector<float>{3, 4});
  CHECK(g[1].to_vector<float>() == std::vector<float>{0});
}

TEST_CASE("differentiating a non-scalar or non-float output is an error that says so") {
  CHECK_THROWS_WITH_AS(grad([](const Array& x) { return x * 2.0f; })(ones({3})),
                       doctest::Contains("[grad] the function must return a scalar (shape ()), got shape (3,)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(grad([](const Array& x) { return sum(astype(x, i32)); })(ones({3})),
                       doctest::Contains("[grad] the function must return a floating scalar, got dtype i32"),
                       DTypeError);
}

namespace {
struct Tower {
  Frozen<Layer> base;
  Array head;
  KILN_MODULE(Tower, base, head);
};
}  // namespace

TEST_CASE("arrays inside Frozen get None gradients and still shape the loss") {
  Tower t{{Layer{full({2, 2}, 0.5), zeros({2}), array<std::int32_t>({0, 0}), tanh}},
          full({2}, 2.0)};
  auto loss = [](const Tower& m, const Array& x) {
    return sum(layer_loss(*m.base, x) * m.head);
  };
  Array x = array<float>({1, 1}, {1, 2});
  Tower g = grad(loss)(t, x);
  CHECK(g.base->weight.is_null());
  CHECK(g.base->bias.is_null());
  CHECK(tree::paths(g) == std::vector<std::string>{"head"});
  // layer_loss = 2 * tanh(1): d/dhead sum(l * head) = l for both entries
  const float l = 2 * std::tanh(1.0f);
  CHECK(g.head.to_vector<float>() == std::vector<float>{l, l});
  CHECK(tree::frozen_leaves(tree::structure(t)) ==
        std::vector<bool>{true, true, true, false});
}

TEST_CASE("differentiating with respect to no floating array is an error naming what was found") {
  auto f = [](const Array& x) { return sum(astype(x, f32)); };
  CHECK_THROWS_WITH_AS(grad(f)(arange(3.0)),
                       "[grad] the first argument has no floating array to differentiate "
                       "(outside Frozen): found <root>: i32(3,); grad differentiates the "
                       "floating leaves of its first argument",
                       DTypeError);
}

TEST_CASE("gradients of the composite ops (clip, reciprocal, logaddexp) match finite differences") {
  // clip: 1 inside the bounds, 0 outside (inputs kept off the bounds).
  Array x = random_array({2, 5}, -2, 2);
  x = where(abs(abs(x) - 1.0) < 0.05, x + 0.2, x);
  check_fd([](const std::vector<Array>& v) { return weighted(clip(v[0], -1.0, 1.0)); }, {x});
  check_fd([](const std::vector<Array>& v) { return weighted(reciprocal(v[0])); },
           {random_array({3, 2}, -2, 2, 0.3)});
  // In f64, which Vulkan's log1p does not take (kiln's own is f32's):
  // there the backend-ops harness checks log1p's vjp in f32.
  if (default_device() == Device::cpu()) {
    check_fd([](const std::vector<Array>& v) { return weighted(logaddexp(v[0], v[1])); },
             {random_array({2, 3}, -3, 3), random_array({3}, -3, 3)});
  }
}

TEST_CASE("the gradient of a gather is a scatter_add: no one-hot matrix, memory O(rows + tokens)") {
  // An embedding lookup: 2000 rows of 8, 512 tokens. A one-hot gradient would
  // hold a 512 x 2000 matrix (4 MB); the scatter holds the table's gradient.
  const std::int64_t vocab = 2000, dim = 8, tokens = 512;
  std::vector<std::int32_t> ids(tokens);
  for (std::int64_t t = 0; t < tokens; ++t) ids[t] = static_cast<std::int32_t>((t * 37) % vocab);
  const Array idx = array<std::int32_t>(ids, {tokens});
  const Array table = astype(reshape(arange(vocab * dim), {vocab, dim}), f32) * 0.001f;
  auto loss = [&](const Array& w) { return sum(take(w, idx, 0) * take(w, idx, 0)); };
  auto step = filter_jit([&](const Array& w) { return grad(loss)(w); });
  const Array g = step(table);
  const std::string text = step.compiled_text();
  CHECK(text.find("scatter_add") != std::string::npos);
  CHECK(text.find("one_hot") == std::string::npos);
  CHECK(text.find("matmul") == std::string::npos);
  const std::size_t table_bytes = static_cast<std::size_t>(vocab * dim * 4);
  CHECK(step.last_run().peak_bytes < 4 * table_bytes);
  // d/dw sum(w[idx]^2) = 2 w[r] * (times r occurs in idx)
  std::vector<float> want(static_cast<std::size_t>(vocab * dim), 0.0f);
  const std::vector<float> w = table.to_vector<float>();
  for (auto r : ids) {
    for (std::int64_t c = 0; c < dim; ++c) {
      const std::size_t at = static_cast<std::size_t>(r * dim + c);
      want[at] += 2 * w[at];
    }
  }
  const std::vector<float> got = g.to_vector<float>();
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
  }
}
