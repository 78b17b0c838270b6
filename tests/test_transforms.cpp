// vmap, vjp, jvp, jacrev/jacfwd/hessian and their compositions with grad,
// filter_jit and control flow: values against per-example loops, analytic
// derivatives and finite differences. Device-generic (KILN_DEVICE).
#include <doctest/doctest.h>

#include <cmath>
#include <kiln/kiln.hpp>
#include <vector>

#include "check_close.hpp"

using namespace kiln;
using kiln::testing::check_close;

namespace {

Device dev() { return default_device(); }

Array rand(std::uint32_t seed, const Shape& shape) {
  return to_device(random::normal(random::key(seed), shape), dev());
}


Array row(const Array& a, std::int64_t i) {
  return reshape(slice_axis(a, 0, i, i + 1), Shape(a.shape().begin() + 1, a.shape().end()));
}

}  // namespace

TEST_CASE("vmap: mapped and shared arguments, out_axis, nested, errors naming the argument") {
  const Array w = rand(1, {3, 2}), b = rand(2, {2}), xs = rand(3, {5, 3});
  const auto layer = [](const Array& x, const Array& ww, const Array& bb) {
    return tanh(matmul(x, ww) + bb);
  };
  const Array ys = vmap(layer, {0, std::nullopt, std::nullopt})(xs, w, b);
  REQUIRE(ys.shape() == Shape{5, 2});
  for (std::int64_t i = 0; i < 5; ++i) check_close(row(ys, i), layer(row(xs, i), w, b));
  // out_axis 1, and in_axes along axis 1.
  const Array yt = vmap(layer, {1, std::nullopt, std::nullopt}, 1)(transpose(xs), w, b);
  check_close(yt, transpose(ys));
  // vmap of vmap: an outer product.
  const auto outer =
      vmap(vmap([](const Array& u, const Array& v) { return u * v; }, {std::nullopt, 0}),
           {0, std::nullopt});
  check_close(outer(rand(4, {3}), rand(5, {4})), reshape(rand(4, {3}), {3, 1}) * rand(5, {4}));
  // A mapped reduction, a mapped index and a mapped matmul of two batches.
  const Array ms = rand(6, {4, 2, 3}), ns = rand(7, {4, 3, 2});
  const Array mm =
      vmap([](const Array& m, const Array& n) { return sum(matmul(m, n), 0); })(ms, ns);
  for (std::int64_t i = 0; i < 4; ++i)
    check_close(row(mm, i), sum(matmul(row(ms, i), row(ns, i)), 0));

  CHECK_THROWS_WITH_AS(vmap(layer, {0, 0, std::nullopt})(xs, w, b),
                       doctest::Contains("[vmap] arg1 has 3 examples along axis 0 but arg0 has 5"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(vmap(layer, {0})(xs, w, b),
                       doctest::Contains("[vmap] in_axes has 1 entries for 3 arguments"),
                       ValueError);
  CHECK_THROWS_WITH_AS(vmap(layer, {std::nullopt, std::nullopt, std::nullopt})(xs, w, b),
                       doctest::Contains("[vmap] no argument is mapped"), ValueError);
}

TEST_CASE(
    "per-example gradients of the Fashion-MNIST MLP: vmap(grad) in one jitted call equals the "
    "loop") {
  const nn::MLP model(784, 10, 64, 2, to_device(random::key(0), dev()));
  const Array x = rand(11, {8, 784});
  const Array y = to_device(
      Array::from_data<std::int32_t>(std::vector<std::int32_t>{0, 3, 9, 1, 1, 7, 2, 5}, {8}),
      dev());
  const auto loss = [](const nn::MLP& m, const Array& xi, const Array& yi) {
    const Array logits = m(reshape(xi, {1, 784}));
    return mean(nn::softmax_cross_entropy_with_integer_labels(logits, reshape(yi, {1})));
  };
  auto per_example_norms = filter_jit([&](const nn::MLP& m, const Array& xb, const Array& yb) {
    const nn::MLP g = vmap(grad(loss), {std::nullopt, 0, 0})(m, xb, yb);
    Array sq = zeros({8}, f32, xb.device());
    for (const Array& leaf : tree::leaves(g)) {
      sq = sq + sum(reshape(leaf * leaf, {8, leaf.size() / 8}), 1);
    }
    return std::pair{g, sqrt(sq)};
  });
  auto [g, norms] = per_example_norms(model, x, y);
  CHECK(per_example_norms.trace_count() == 1);
  const std::vector<float> got = norms.to_vector<float>();
  for (std::int64_t i = 0; i < 8; ++i) {
    const nn::MLP gi = grad(loss)(model, row(x, i), row(y, i));
    double sq = 0;
    const std::vector<Array> li = tree::leaves(gi), lb = tree::leaves(g);
    REQUIRE(li.size() == lb.size());
    for (std::size_t k = 0; k < li.size(); ++k) {
      check_close(row(lb[k], i), li[k], 1e-4);
      for (float v : li[k].to_vector<float>()) sq += static_cast<double>(v) * v;
    }
    CHECK(got[static_cast<std::size_t>(i)] == doctest::Approx(std::sqrt(sq)).epsilon(1e-4));
  }
}

TEST_CASE("vjp, jvp, jacrev, jacfwd and hessian against analytic derivatives") {
  const Array x =
      to_device(Array::from_data<float>(std::vector<float>{0.3f, -1.2f, 2.0f}, {3}), dev());
  const auto f = [](const Array& v) { return v * sin(v); };
  auto [y, pullback] = vjp(f, x);
  check_close(y, x * sin(x));
  const Array d = sin(x) + x * cos(x);
  check_close(pullback(ones_like(x)), d);
  check_close(pullback(2.0 * ones_like(x)), 2.0 * d);  // linear, reusable

  const Array t =
      to_device(Array::from_data<float>(std::vector<float>{1.0f, 0.5f, -2.0f}, {3}), dev());
  auto [yv, tangent] = jvp(f, x, t);
  check_close(yv, x * sin(x));
  check_close(tangent, d * t);

  const Array w = rand(9, {2, 3});
  const auto g = [&](const Array& v) { return tanh(matmul(w, v)); };
  const Array jr = jacrev(g)(x), jf = jacfwd(g)(x);
  REQUIRE(jr.shape() == Shape{2, 3});
  check_close(jf, jr, 1e-5);
  const Array th = tanh(matmul(w, x));
  check_close(jr, reshape(1.0 - th * th, {2, 1}) * w, 1e-5);

  const Array h = hessian([](const Array& v) { return sum(v * v * v); })(x);
  const std::vector<float> hv = h.to_vector<float>();
  const std::vector<float> xv = x.to_vector<float>();
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      CHECK(hv[static_cast<std::size_t>(i * 3 + j)] ==
            doctest::Approx(i == j ? 6.0 * xv[static_cast<std::size_t>(i)] : 0.0)
                .epsilon(1e-5)
                .scale(1.0));
    }
  }
  // Through control flow: jvp of a scan against a central difference.
  const auto s = [](const Array& v) {
    return scan(
               [](const Array& c, const Array& e) {
                 return std::pair{tanh(c * 1.5 + e), c};
               },
               v, reshape(v, {3, 1}))
        .first;
  };
  auto [sv, st] = jvp(s, x, t);
  const double eps = 1e-3;
  const Array fd = (s(x + eps * t) - s(x - eps * t)) / (2 * eps);
  check_close(st, fd, 1e-2);
}

TEST_CASE("transforms compose: jit(vmap(grad(scan))) equals the per-example loop") {
  const Array w = rand(21, {4, 4}) * 0.5;
  const Array xs = rand(22, {3, 6, 4});  // 3 examples of 6 steps
  const auto loss = [](const Array& ww, const Array& seq) {
    auto [h, ys] = scan(
        [&](const Array& c, const Array& e) {
          const Array n = tanh(matmul(c, ww) + e);
          return std::pair{n, sum(n)};
        },
        zeros({4}, f32, seq.device()), seq);
    return sum(ys) + sum(h * h);
  };
  auto per_example = filter_jit([&](const Array& ww, const Array& batch) {
    return vmap(grad(loss), {std::nullopt, 0})(ww, batch);
  });
  const Array gs = per_example(w, xs);
  REQUIRE(gs.shape() == Shape{3, 4, 4});
  for (std::int64_t i = 0; i < 3; ++i) check_close(row(gs, i), grad(loss)(w, row(xs, i)), 1e-4);
}
