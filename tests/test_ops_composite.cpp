// Composite ops (written in other DSL ops): the layout composites (stack,
// split, flip, tile, repeat, roll, pad, tril/triu, diagonal, meshgrid,
// linspace, eye), the reductions (logsumexp, var/std, any/all,
// count_nonzero), nan_to_num, floor_divide/mod and einsum. Values are numpy's
// (computed with numpy 1.24 and pasted), gradients are checked against
// central finite differences, and every op's errors are checked by message.
// Arrays are created on the default device, so this runs on every backend.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <kiln/dsl/autodiff.hpp>
#include <kiln/kiln.hpp>
#include <limits>
#include <vector>

using namespace kiln;

namespace {

using I = std::int32_t;
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> as_doubles(const Array& a) { return astype(a, f64).to_vector<double>(); }

void check_close(const Array& a, const std::vector<double>& expected, double eps = 1e-6) {
  const std::vector<double> got = as_doubles(a);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    if (std::isnan(expected[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(expected[i])) {
      CHECK(got[i] == expected[i]);
    } else {
      CHECK(got[i] == doctest::Approx(expected[i]).epsilon(eps));
    }
  }
}

// (r, c) f64 with distinct, irregular values.
Array test_matrix(std::int64_t r, std::int64_t c) {
  std::vector<double> v(static_cast<std::size_t>(r * c));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(1.0 + 1.7 * static_cast<double>(i));
  return array<double>(v, Shape{r, c});
}

// grad(f) at x (f64) against central differences of f, elementwise.
void check_fd(const std::function<Array(const Array&)>& f, const Array& x, double tol = 1e-6) {
  const Array g = grad(f)(x);
  REQUIRE(g.shape() == x.shape());
  const std::vector<double> base = x.to_vector<double>();
  const std::vector<double> got = g.to_vector<double>();
  const double eps = 1e-6;
  for (std::size_t k = 0; k < base.size(); ++k) {
    auto at = [&](double delta) {
      std::vector<double> v = base;
      v[k] += delta;
      return f(array<double>(v, x.shape())).item<double>();
    };
    const double fd = (at(eps) - at(-eps)) / (2 * eps);
    CAPTURE(k);
    CHECK(got[k] == doctest::Approx(fd).epsilon(tol).scale(1.0));
  }
}

// sum(out * w) for a fixed w, so each output element has its own weight.
Array weighted(const Array& out) {
  std::vector<double> w(static_cast<std::size_t>(out.size()));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.5 + std::cos(0.3 * static_cast<double>(i));
  return sum(out * astype(array<double>(w, out.shape()), out.dtype()));
}

}  // namespace

// ---- layout ----

TEST_CASE("composite stack joins along a new axis, negative axes count in the result") {
  const Array a = array<I>({1, 2, 3});
  const Array b = array<I>({4, 5, 6});
  Array s = stack({a, b});
  CHECK(s.shape() == Shape{2, 3});
  CHECK(s.to_vector<I>() == std::vector<I>{1, 2, 3, 4, 5, 6});
  s = stack({a, b}, 1);
  CHECK(s.shape() == Shape{3, 2});
  CHECK(s.to_vector<I>() == std::vector<I>{1, 4, 2, 5, 3, 6});
  CHECK(stack({a, b}, -1).to_vector<I>() == s.to_vector<I>());
  CHECK(stack({scalar(1.0f), scalar(2.0f)}).to_vector<float>() == std::vector<float>{1, 2});
  CHECK(stack({a}).shape() == Shape{1, 3});
  CHECK(stack({zeros({0, 2}), zeros({0, 2})}, 1).shape() == Shape{0, 2, 2});
}

TEST_CASE("composite split into equal sections or at indices, as numpy.split") {
  const Array x = reshape(arange(12), {2, 6});
  std::vector<Array> parts = split(x, 3, 1);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].shape() == Shape{2, 2});
  CHECK(parts[1].to_vector<I>() == std::vector<I>{2, 3, 8, 9});
  CHECK(parts[2].to_vector<I>() == std::vector<I>{4, 5, 10, 11});
  parts = split(x, {1, 4}, -1);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].to_vector<I>() == std::vector<I>{0, 6});
  CHECK(parts[1].to_vector<I>() == std::vector<I>{1, 2, 3, 7, 8, 9});
  CHECK(parts[2].to_vector<I>() == std::vector<I>{4, 5, 10, 11});
  parts = split(arange(5), {2});  // an index, not 2 sections
  REQUIRE(parts.size() == 2);
  CHECK(parts[1].to_vector<I>() == std::vector<I>{2, 3, 4});
  // Python slice bounds: negative, past the end, decreasing (empty pieces).
  parts = split(arange(5), Shape{-2, 9, 3});
  REQUIRE(parts.size() == 4);
  CHECK(parts[0].to_vector<I>() == std::vector<I>{0, 1, 2});
  CHECK(parts[1].to_vector<I>() == std::vector<I>{3, 4});
  CHECK(parts[2].size() == 0);
  CHECK(parts[3].to_vector<I>() == std::vector<I>{3, 4});
  parts = split(zeros({0, 3}), 3);  // 0 divides into any number of sections
  CHECK(parts.size() == 3);
  CHECK(parts[2].shape() == Shape{0, 3});
  CHECK(split(x, 1)[0].to_vector<I>() == x.to_vector<I>());
}

TEST_CASE("composite stack and split errors name the op") {
  CHECK_THROWS_WITH_AS(stack(std::span<const Array>{}), "[stack] needs at least one array",
                       ValueError);
  CHECK_THROWS_WITH_AS(
      stack({zeros({2}), zeros({3})}),
      doctest::Contains("[stack] array 1 has shape (3,) but array 0 has shape (2,)"), ShapeError);
  CHECK_THROWS_WITH_AS(stack({zeros({2}), zeros({2}, i32)}),
                       "[stack] array 1 has dtype i32 but array 0 has dtype f32", DTypeError);
  CHECK_THROWS_WITH_AS(stack({zeros({2})}, 2),
                       "[stack] axis 2 is out of range for an array of rank 2", ShapeError);
  CHECK_THROWS_WITH_AS(split(arange(5), 2),
                       doctest::Contains("[split] axis 0 of shape (5,) (length 5) does not "
                                         "divide into 2 equal sections"),
                       ValueError);
  CHECK_THROWS_WITH_AS(split(arange(4), 0), "[split] the number of sections must be > 0, got 0",
                       ValueError);
  CHECK_THROWS_WITH_AS(split(scalar(1.0f), 1),
                       "[split] axis 0 is out of range for an array of rank 0", ShapeError);
}

TEST_CASE("composite stack and split gradients are the pieces of the cotangent") {
  const Array x = test_matrix(2, 6);
  check_fd(
      [](const Array& v) {
        std::vector<Array> p = split(v, {1, 4}, 1);
        return weighted(
            stack({p[0] * 2.0, slice_axis(p[1], 1, 0, 1), slice_axis(p[2], 1, 1, 2)}, 1));
      },
      x);
}

TEST_CASE("composite flip reverses all axes or the given ones") {
  const Array x = reshape(arange(6), {2, 3});
  CHECK(flip(x).to_vector<I>() == std::vector<I>{5, 4, 3, 2, 1, 0});
  CHECK(flip(x, 1).to_vector<I>() == std::vector<I>{2, 1, 0, 5, 4, 3});
  CHECK(flip(x, -2).to_vector<I>() == std::vector<I>{3, 4, 5, 0, 1, 2});
  CHECK(flip(x, {0, 1}).to_vector<I>() == std::vector<I>{5, 4, 3, 2, 1, 0});
  CHECK(flip(arange(5)).to_vector<I>() == std::vector<I>{4, 3, 2, 1, 0});  // odd length
  CHECK(flip(zeros({0, 3})).shape() == Shape{0, 3});
  CHECK(flip(scalar(3.0f)).item<float>() == 3.0f);
  CHECK(flip(array<bool>({true, false, false})).to_vector<bool>() ==
        std::vector<bool>{false, false, true});
  CHECK_THROWS_WITH_AS(flip(x, 2), "[flip] axis 2 is out of range for an array of rank 2",
                       ShapeError);
  CHECK_THROWS_WITH_AS(flip(x, {0, 0}), doctest::Contains("[flip] repeated axis"), ShapeError);
  check_fd([](const Array& v) { return weighted(flip(v, 1)); }, test_matrix(2, 3));
}

TEST_CASE("composite tile and repeat follow numpy.tile and numpy.repeat") {
  const Array x = array<I>({1, 2, 3, 4}, {2, 2});
  Array t = tile(x, {2, 3});
  CHECK(t.shape() == Shape{4, 6});
  CHECK(t.to_vector<I>() ==
        std::vector<I>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4});
  // Fewer reps than dims: leading 1s; more: a's shape gets leading 1s.
  CHECK(tile(x, {2}).to_vector<I>() == std::vector<I>{1, 2, 1, 2, 3, 4, 3, 4});
  t = tile(array<I>({5, 6}), {2, 1, 2});
  CHECK(t.shape() == Shape{2, 1, 4});
  CHECK(t.to_vector<I>() == std::vector<I>{5, 6, 5, 6, 5, 6, 5, 6});
  CHECK(tile(x, {0, 1}).shape() == Shape{0, 2});
  CHECK(tile(scalar(2.0f), {3}).to_vector<float>() == std::vector<float>{2, 2, 2});

  CHECK(repeat(x, 2).to_vector<I>() == std::vector<I>{1, 1, 2, 2, 3, 3, 4, 4});
  Array r = repeat(x, 3, 1);
  CHECK(r.shape() == Shape{2, 6});
  CHECK(r.to_vector<I>() == std::vector<I>{1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4});
  r = repeat(x, 2, -2);
  CHECK(r.to_vector<I>() == std::vector<I>{1, 2, 1, 2, 3, 4, 3, 4});
  CHECK(repeat(x, 0, 0).shape() == Shape{0, 2});
  CHECK(repeat(scalar(7), 3).to_vector<I>() == std::vector<I>{7, 7, 7});

  CHECK_THROWS_WITH_AS(tile(x, {2, -1}), "[tile] reps must be >= 0, got (2, -1)", ValueError);
  CHECK_THROWS_WITH_AS(repeat(x, -1), "[repeat] repeats must be >= 0, got -1", ValueError);
  CHECK_THROWS_WITH_AS(repeat(x, 2, 2), "[repeat] axis 2 is out of range for an array of rank 2",
                       ShapeError);
  // Gradients sum the copies.
  check_fd([](const Array& v) { return weighted(tile(v, {2, 1, 2})); }, test_matrix(2, 3));
  check_fd([](const Array& v) { return weighted(repeat(v, 3, 1)); }, test_matrix(2, 3));
  check_fd([](const Array& v) { return weighted(repeat(v, 2)); }, test_matrix(2, 3));
}

TEST_CASE("composite roll shifts with wrap-around, flattened without an axis") {
  const Array x = reshape(arange(6), {2, 3});
  CHECK(roll(arange(5), 2).to_vector<I>() == std::vector<I>{3, 4, 0, 1, 2});
  CHECK(roll(arange(5), -2).to_vector<I>() == std::vector<I>{2, 3, 4, 0, 1});
  CHECK(roll(arange(5), 12).to_vector<I>() == std::vector<I>{3, 4, 0, 1, 2});
  CHECK(roll(arange(5), 5).to_vector<I>() == std::vector<I>{0, 1, 2, 3, 4});
  Array r = roll(x, 1);
  CHECK(r.shape() == Shape{2, 3});
  CHECK(r.to_vector<I>() == std::vector<I>{5, 0, 1, 2, 3, 4});
  CHECK(roll(x, 1, 1).to_vector<I>() == std::vector<I>{2, 0, 1, 5, 3, 4});
  CHECK(roll(x, -1, -2).to_vector<I>() == std::vector<I>{3, 4, 5, 0, 1, 2});
  CHECK(roll(zeros({0}), 3).shape() == Shape{0});
  CHECK(roll(scalar(4), 1).item<I>() == 4);
  CHECK_THROWS_WITH_AS(roll(x, 1, 3), "[roll] axis 3 is out of range for an array of rank 2",
                       ShapeError);
  check_fd([](const Array& v) { return weighted(roll(v, 2, 1)); }, test_matrix(2, 3));
  check_fd([](const Array& v) { return weighted(roll(v, -4)); }, test_matrix(2, 3));
}

TEST_CASE("composite pad in constant, edge and reflect modes, as numpy.pad") {
  const Array x = array<I>({1, 2, 3, 4}, {2, 2});
  Array p = pad(x, {{1, 1}, {0, 1}}, "constant", 7);
  CHECK(p.shape() == Shape{4, 3});
  CHECK(p.to_vector<I>() == std::vector<I>{7, 7, 7, 1, 2, 7, 3, 4, 7, 7, 7, 7});
  p = pad(x, {{1, 0}, {2, 1}}, "edge");
  CHECK(p.shape() == Shape{3, 5});
  CHECK(p.to_vector<I>() == std::vector<I>{1, 1, 1, 2, 2, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4});
  // Reflect does not repeat the border; wide pads reflect again.
  CHECK(pad(array<I>({1, 2, 3}), {{5, 4}}, "reflect").to_vector<I>() ==
        std::vector<I>{2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3});
  CHECK(pad(array<I>({1, 2}), {{3, 3}}, "reflect").to_vector<I>() ==
        std::vector<I>{2, 1, 2, 1, 2, 1, 2, 1});
  CHECK(pad(array<I>({5}), {{2, 1}}, "reflect").to_vector<I>() == std::vector<I>{5, 5, 5, 5});
  // One entry applies to every axis; default mode constant 0.
  p = pad(array<float>({1, 2, 3, 4}, {2, 2}), {{1, 0}});
  CHECK(p.to_vector<float>() == std::vector<float>{0, 0, 0, 0, 1, 2, 0, 3, 4});
  CHECK(pad(zeros({0}), {{2, 1}}, "constant", 1.5).to_vector<float>() ==
        std::vector<float>{1.5, 1.5, 1.5});
  CHECK(pad(array<bool>({true}), {{1, 0}}).to_vector<bool>() == std::vector<bool>{false, true});
  CHECK(pad(x, {{0, 0}}).to_vector<I>() == x.to_vector<I>());

  CHECK_THROWS_WITH_AS(pad(x, {{1, 1}, {1, 1}, {1, 1}}),
                       doctest::Contains("[pad] pad_width has 3 entries for an array of rank 2"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(pad(x, {{1, -1}}), "[pad] pad widths must be >= 0, got (1, -1) for axis 0",
                       ValueError);
  CHECK_THROWS_WITH_AS(pad(x, {{1, 1}}, "wrap"),
                       "[pad] mode 'wrap' is not supported; use constant, edge or reflect",
                       ValueError);
  CHECK_THROWS_WITH_AS(pad(zeros({0}), {{1, 1}}, "edge"),
                       doctest::Contains("[pad] cannot extend the empty axis 0 of shape (0,)"),
                       ValueError);
  CHECK_THROWS_WITH_AS(pad(x, {{1, 1}}, "constant", 0.5),
                       "[pad] scalar 0.5 cannot be represented in dtype i32", DTypeError);
  for (const char* mode : {"constant", "edge", "reflect"}) {
    CAPTURE(mode);
    check_fd(
        [&](const Array& v) {
          return weighted(pad(v, {{2, 1}, {1, 3}}, mode, 0.5));
        },
        test_matrix(2, 3));
  }
}

TEST_CASE("composite tril and triu keep a triangle of the last two axes") {
  const Array x = reshape(arange(1.0, 13.0, 1.0, f32), {3, 4});
  CHECK(tril(x).to_vector<float>() == std::vector<float>{1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0});
  CHECK(tril(x, 1).to_vector<float>() == std::vector<float>{1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12});
  CHECK(tril(x, -1).to_vector<float>() == std::vector<float>{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  CHECK(triu(x).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
  CHECK(triu(x, 2).to_vector<float>() == std::vector<float>{0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0});
  CHECK(triu(x, -1).to_vector<float>() ==
        std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12});
  CHECK(triu(x, 10).to_vector<float>() == std::vector<float>(12, 0));
  // Batched over leading axes; integer and bool dtypes.
  Array b = tril(reshape(arange(8), {2, 2, 2}));
  CHECK(b.to_vector<I>() == std::vector<I>{0, 0, 2, 3, 4, 0, 6, 7});
  CHECK(triu(ones({2, 2}, bool_)).to_vector<bool>() == std::vector<bool>{true, true, false, true});
  CHECK(tril(zeros({0, 3})).shape() == Shape{0, 3});
  CHECK_THROWS_WITH_AS(tril(arange(3)), "[tril] needs an array of rank >= 2, got shape (3,)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(triu(scalar(1.0f)), "[triu] needs an array of rank >= 2, got shape ()",
                       ShapeError);
  check_fd([](const Array& v) { return weighted(tril(v, 1)); }, test_matrix(3, 4));
  check_fd([](const Array& v) { return weighted(triu(v, -1)); }, test_matrix(3, 4));
}

TEST_CASE("composite diagonal takes offset diagonals of any two axes") {
  const Array x = reshape(arange(12), {3, 4});
  CHECK(diagonal(x).to_vector<I>() == std::vector<I>{0, 5, 10});
  CHECK(diagonal(x, 1).to_vector<I>() == std::vector<I>{1, 6, 11});
  CHECK(diagonal(x, 3).to_vector<I>() == std::vector<I>{3});
  CHECK(diagonal(x, -1).to_vector<I>() == std::vector<I>{4, 9});
  CHECK(diagonal(x, 4).shape() == Shape{0});
  CHECK(diagonal(x, -5).shape() == Shape{0});
  CHECK(diagonal(x, 0, 1, 0).to_vector<I>() == std::vector<I>{0, 5, 10});
  // numpy: the remaining axes first, the diagonal last.
  const Array y = reshape(arange(24), {2, 3, 4});
  Array d = diagonal(y, 0, 1, 2);
  CHECK(d.shape() == Shape{2, 3});
  CHECK(d.to_vector<I>() == std::vector<I>{0, 5, 10, 12, 17, 22});
  d = diagonal(y, 1, -1, 0);  // (k, i): y[i, j, k] with i = k + 1
  CHECK(d.shape() == Shape{3, 1});
  CHECK(d.to_vector<I>() == std::vector<I>{12, 16, 20});
  CHECK_THROWS_WITH_AS(diagonal(arange(3)),
                       "[diagonal] needs an array of rank >= 2, got shape (3,)", ShapeError);
  CHECK_THROWS_WITH_AS(diagonal(x, 0, 1, -1),
                       "[diagonal] axis1 and axis2 are the same axis (1) of shape (3, 4)",
                       ValueError);
  CHECK_THROWS_WITH_AS(diagonal(x, 0, 0, 2),
                       "[diagonal] axis 2 is out of range for an array of rank 2", ShapeError);
  check_fd([](const Array& v) { return weighted(diagonal(v, 1)); }, test_matrix(3, 4));
}

TEST_CASE("composite meshgrid in xy and ij indexing") {
  const Array x = array<I>({1, 2, 3});
  const Array y = array<I>({4, 5});
  std::vector<Array> g = meshgrid({x, y});
  REQUIRE(g.size() == 2);
  CHECK(g[0].shape() == Shape{2, 3});
  CHECK(g[0].to_vector<I>() == std::vector<I>{1, 2, 3, 1, 2, 3});
  CHECK(g[1].to_vector<I>() == std::vector<I>{4, 4, 4, 5, 5, 5});
  g = meshgrid({x, y}, "ij");
  CHECK(g[0].shape() == Shape{3, 2});
  CHECK(g[0].to_vector<I>() == std::vector<I>{1, 1, 2, 2, 3, 3});
  CHECK(g[1].to_vector<I>() == std::vector<I>{4, 5, 4, 5, 4, 5});
  g = meshgrid({x, y, array<I>({6, 7})});
  CHECK(g[2].shape() == Shape{2, 3, 2});
  CHECK(g[2].to_vector<I>() == std::vector<I>{6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7});
  CHECK(g[0].to_vector<I>() == std::vector<I>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  g = meshgrid({x});
  CHECK(g[0].to_vector<I>() == std::vector<I>{1, 2, 3});
  CHECK(meshgrid({x, zeros({0}, i32)})[0].shape() == Shape{0, 3});
  CHECK(meshgrid(std::span<const Array>{}).empty());
  CHECK_THROWS_WITH_AS(meshgrid({x}, "yx"),
                       "[meshgrid] indexing must be \"xy\" or \"ij\", got \"yx\"", ValueError);
  CHECK_THROWS_WITH_AS(meshgrid({x, zeros({2, 2})}),
                       "[meshgrid] array 1 has shape (2, 2); every input must be 1-D", ShapeError);
}

TEST_CASE("composite linspace and eye create as numpy does") {
  check_close(linspace(0, 1, 5), {0, 0.25, 0.5, 0.75, 1});
  check_close(linspace(2, 3, 4, false), {2, 2.25, 2.5, 2.75});
  check_close(linspace(1, -1, 3, true, f64), {1, 0, -1});
  CHECK(linspace(0, 1, 5).dtype() == f32);
  CHECK(linspace(0, 10, 7, true, f64).to_vector<double>().back() == 10.0);  // exact end
  CHECK(linspace(0.1, 0.7, 7).to_vector<float>().back() == 0.7f);
  CHECK(linspace(5, 6, 1).to_vector<float>() == std::vector<float>{5});
  CHECK(linspace(5, 6, 0).shape() == Shape{0});
  CHECK(linspace(0, 50, 50).shape() == Shape{50});
  // Integer dtypes floor, as numpy >= 2 (numpy 1.24: toward zero for negatives).
  CHECK(linspace(0, 5, 4, true, i32).to_vector<I>() == std::vector<I>{0, 1, 3, 5});
  CHECK(linspace(-1, 1, 4, true, i32).to_vector<I>() == std::vector<I>{-1, -1, 0, 1});
  CHECK_THROWS_WITH_AS(linspace(0, 1, -1), "[linspace] num must be >= 0, got -1", ValueError);
  CHECK_THROWS_WITH_AS(linspace(0, 1, 2, true, bool_), "[linspace] dtype bool is not numeric",
                       DTypeError);

  Array e = eye(3);
  CHECK(e.dtype() == f32);
  CHECK(e.to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  e = eye(2, 3, 1, i32);
  CHECK(e.shape() == Shape{2, 3});
  CHECK(e.to_vector<I>() == std::vector<I>{0, 1, 0, 0, 0, 1});
  CHECK(eye(3, 2, -1, i32).to_vector<I>() == std::vector<I>{0, 0, 1, 0, 0, 1});
  CHECK(eye(2, 2, 5, i32).to_vector<I>() == std::vector<I>{0, 0, 0, 0});
  CHECK(eye(0).shape() == Shape{0, 0});
  CHECK(eye(1, -1, 0, bool_).to_vector<bool>() == std::vector<bool>{true});
  CHECK_THROWS_WITH_AS(eye(-2), "[eye] n must be >= 0, got -2", ValueError);
}

// ---- reductions ----

TEST_CASE("composite logsumexp is stable, gives -inf for -inf rows and empty reductions") {
  const Array x = array<double>({0.5, -1, 2, 3, 0.25, -2}, {2, 3});
  check_close(logsumexp(x), {3.43109769}, 1e-8);
  check_close(logsumexp(x, 1), {2.241311296657157, 3.0682807056157664});
  check_close(logsumexp(x, -2), {3.0788897342925496, 0.501929081345373, 2.01814992791781});
  Array k = logsumexp(x, 1, true);
  CHECK(k.shape() == Shape{2, 1});
  check_close(logsumexp(astype(x, f32), {0, 1}), {3.43109769});
  // No overflow where exp would: log(2 e^1000) = 1000 + log 2.
  check_close(logsumexp(array<float>({1000, 1000})), {1000.6931471805599});
  check_close(logsumexp(array<double>({-kInf, -kInf, 0, -kInf}, {2, 2}), 1), {-kInf, 0});
  check_close(logsumexp(array<double>({kInf, 1, kNaN, 1}, {2, 2}), 1), {kInf, kNaN});
  check_close(logsumexp(zeros({2, 0}), 1), {-kInf, -kInf});
  CHECK(logsumexp(zeros({2, 0}), 1, true).shape() == Shape{2, 1});
  check_close(logsumexp(zeros({0})), {-kInf});
  check_close(logsumexp(scalar(2.5)), {2.5});
  CHECK_THROWS_WITH_AS(logsumexp(arange(3)),
                       doctest::Contains("[logsumexp] requires a floating dtype, got i32"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(logsumexp(x, 2), "[logsumexp] axis 2 is out of range for an array of rank 2",
                       ShapeError);
  // The gradient is softmax.
  check_fd([](const Array& v) { return weighted(logsumexp(v, 1)); }, test_matrix(3, 4));
  check_fd([](const Array& v) { return logsumexp(v); }, test_matrix(2, 3));
  const Array g = grad([](const Array& v) { return logsumexp(v); })(x);
  const double lse = 3.43109769;
  std::vector<double> softmax;
  for (double v : x.to_vector<double>()) softmax.push_back(std::exp(v - lse));
  check_close(g, softmax, 1e-7);
}

TEST_CASE("composite var and std with ddof and keepdims, as numpy") {
  const Array x = array<double>({0.5, -1, 2, 3, 0.25, -2}, {2, 3});
  check_close(var(x), {2.8420138888888893});
  check_close(var(x, 1), {1.5, 4.180555555555555});
  check_close(var(x, 0, 1), {3.125, 0.78125, 8.0});
  check_close(kiln::std(x, -1), {1.224744871391589, 2.0446406910642163});
  CHECK(var(x, 1, 0, true).shape() == Shape{2, 1});
  CHECK(kiln::std(x, {0, 1}, 0, true).shape() == Shape{1, 1});
  check_close(var(astype(x, f32), 1), {1.5, 4.180555555555555});
  check_close(var(scalar(3.0)), {0});
  // N - ddof <= 0 divides by 0: NaN (0 / 0), as numpy; empty: NaN.
  check_close(var(array<double>({1.0}), {}, 1), {kNaN});
  check_close(var(zeros({0})), {kNaN});
  CHECK_THROWS_WITH_AS(var(arange(4)),
                       doctest::Contains("[var] requires a floating dtype, got i32"), DTypeError);
  CHECK_THROWS_WITH_AS(kiln::std(arange(4)),
                       doctest::Contains("[std] requires a floating dtype, got i32"), DTypeError);
  CHECK_THROWS_WITH_AS(var(x, {1, 1}), "[var] repeated axis in (1, 1)", ShapeError);
  check_fd([](const Array& v) { return weighted(var(v, 1, 1)); }, test_matrix(3, 4));
  check_fd([](const Array& v) { return weighted(kiln::std(v, 0)); }, test_matrix(3, 4));
  // d var / dx = 2 (x - mean) / N.
  const Array g = grad([](const Array& v) { return var(v); })(array<double>({1, 2, 6}));
  check_close(g, {2.0 * -2 / 3, 2.0 * -1 / 3, 2.0 * 3 / 3});
}

TEST_CASE("composite any, all and count_nonzero count nonzero elements") {
  const Array x = astype(array<double>({0, 1, 0, 0, 0, 0, kNaN, 2, 3}, {3, 3}), f32);
  Array r = any(x);
  CHECK(r.dtype() == bool_);
  CHECK(r.item<bool>());
  CHECK(any(x, 1).to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK(all(x, 1).to_vector<bool>() == std::vector<bool>{false, false, true});
  CHECK(all(x, 0, true).shape() == Shape{1, 3});
  CHECK(all(x, 0).to_vector<bool>() == std::vector<bool>{false, false, false});
  CHECK_FALSE(all(x).item<bool>());
  CHECK(any(array<bool>({false, true})).item<bool>());
  CHECK(all(array<bool>({true, true})).item<bool>());
  CHECK(any(array<I>({0, -3}), 0).item<bool>());
  // Empty: any is false, all is true, the count is 0.
  CHECK_FALSE(any(zeros({0})).item<bool>());
  CHECK(all(zeros({0})).item<bool>());
  CHECK(all(zeros({2, 0}), 1).to_vector<bool>() == std::vector<bool>{true, true});

  Array c = count_nonzero(x);
  CHECK(c.dtype() == i32);
  CHECK(c.item<I>() == 4);
  CHECK(count_nonzero(x, -1).to_vector<I>() == std::vector<I>{1, 0, 3});
  CHECK(count_nonzero(x, 0, true).to_vector<I>() == std::vector<I>{1, 2, 1});
  CHECK(count_nonzero(array<bool>({true, false, true})).item<I>() == 2);
  CHECK(count_nonzero(zeros({0}, u32)).item<I>() == 0);
  CHECK_THROWS_WITH_AS(any(x, 2), "[any] axis 2 is out of range for an array of rank 2",
                       ShapeError);
  CHECK_THROWS_WITH_AS(all(x, -3), "[all] axis -3 is out of range for an array of rank 2",
                       ShapeError);
  CHECK_THROWS_WITH_AS(count_nonzero(Array()),
                       doctest::Contains("[count_nonzero] argument 1 is None"), ValueError);
}

// ---- elementwise ----

TEST_CASE("composite nan_to_num replaces NaN and infinities") {
  const Array x = astype(array<double>({kNaN, kInf, -kInf, 1.5}), f32);
  check_close(nan_to_num(x),
              {0, std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(), 1.5});
  check_close(nan_to_num(astype(x, f64), -1, 10, -10), {-1, 10, -10, 1.5});
  check_close(nan_to_num(astype(x, f64)),
              {0, std::numeric_limits<double>::max(), std::numeric_limits<double>::lowest(), 1.5});
  CHECK(nan_to_num(array<I>({1, 2})).to_vector<I>() == std::vector<I>{1, 2});
  CHECK(nan_to_num(zeros({0})).shape() == Shape{0});
  CHECK_THROWS_WITH_AS(nan_to_num(Array()), doctest::Contains("[nan_to_num] argument 1 is None"),
                       ValueError);
}

TEST_CASE("composite floor_divide and mod follow Python: the remainder has the divisor's sign") {
  const Array a = array<I>({7, -7, 7, -7, 0, 5, -5, 3});
  const Array b = array<I>({2, 2, -2, -2, 3, 0, 0, -4});
  CHECK(floor_divide(a, b).to_vector<I>() == std::vector<I>{3, -4, -4, 3, 0, 0, 0, -1});
  CHECK(mod(a, b).to_vector<I>() == std::vector<I>{1, 1, -1, -1, 0, 0, 0, -1});
  CHECK(remainder(a, b).to_vector<I>() == mod(a, b).to_vector<I>());
  CHECK(mod(a, 3).to_vector<I>() == std::vector<I>{1, 2, 1, 2, 0, 2, 1, 0});
  CHECK(floor_divide(-7, array<I>({2})).to_vector<I>() == std::vector<I>{-4});
  const Array ua = array<std::uint32_t>({7, 9, 4});
  const Array ub = array<std::uint32_t>({2, 0, 5});
  CHECK(floor_divide(ua, ub).to_vector<std::uint32_t>() == std::vector<std::uint32_t>{3, 0, 0});
  CHECK(mod(ua, ub).to_vector<std::uint32_t>() == std::vector<std::uint32_t>{1, 0, 4});

  const Array fa = array<double>({7.5, -7.5, 7.5, -7.5, 1.0, -1.0, 1.0, 0.0, 5.0, -3.0});
  const Array fb = array<double>({2, 2, -2, -2, kInf, kInf, 0, 3, -2.5, 1.5});
  check_close(floor_divide(fa, fb), {3, -4, -4, 3, 0, -1, kInf, 0, -2, -2});
  check_close(mod(fa, fb), {1.5, 0.5, -0.5, -1.5, 1, kInf, kNaN, 0, 0, 0});
  check_close(mod(astype(fa, f32), astype(fb, f32)),
              {1.5, 0.5, -0.5, -1.5, 1, kInf, kNaN, 0, 0, 0});
  check_close(floor_divide(reshape(fa, {2, 5}), array<double>({2.0, -3.0}, {2, 1})),
              {3, -4, 3, -4, 0, 0, -1, 0, -2, 1});
  CHECK(mod(zeros({0}), 2.0).shape() == Shape{0});

  CHECK_THROWS_WITH_AS(mod(a, fa), doctest::Contains("[mod] dtype mismatch: i32 and f64"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(floor_divide(array<bool>({true}), array<bool>({true})),
                       doctest::Contains("[floor_divide] requires a numeric dtype, got bool"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(remainder(a, zeros({3}, i32)),
                       doctest::Contains("[remainder] shapes (8,) and (3,) cannot be broadcast"),
                       ShapeError);
}

// ---- einsum ----

TEST_CASE("composite einsum matches numpy for matmul, batches, outer products and traces") {
  const Array a = reshape(arange(6.0, f64), {2, 3});
  const Array b = reshape(arange(12.0, f64), {3, 4});
  Array r = einsum("ij,jk->ik", {a, b});
  CHECK(r.shape() == Shape{2, 4});
  check_close(r, {20, 23, 26, 29, 56, 68, 80, 92});
  check_close(einsum("ij,jk", {a, b}), {20, 23, 26, 29, 56, 68, 80, 92});  // implicit
  check_close(einsum(" ij , jk -> ki ", {a, b}), {20, 56, 23, 68, 26, 80, 29, 92});

  const Array A = reshape(arange(24.0, f64), {2, 3, 4});
  const Array B = reshape(arange(40.0, f64), {2, 4, 5}) * 0.5;
  r = einsum("bij,bjk->bik", {A, B});
  CHECK(r.shape() == Shape{2, 3, 5});
  check_close(r,
              {35,  38,  41,  44,  47,  95,  106,  117,  128,  139,  155,  174,  193,  212,  231,
               755, 782, 809, 836, 863, 975, 1010, 1045, 1080, 1115, 1195, 1238, 1281, 1324, 1367});
  r = einsum("bij,bjk", {A, B});  // implicit: b is repeated, so it is summed
  CHECK(r.shape() == Shape{3, 5});
  check_close(slice_axis(reshape(r, {-1}), 0, 0, 5), {790, 820, 850, 880, 910});

  // Three operands: a chain, and batch letters shared by the first and last.
  check_close(einsum("ij,jk,kl->il", {a, b * 0.25, reshape(arange(8.0, f64), {4, 2}) - 1.0}),
              {56.5, 81, 178, 252});
  check_close(einsum("bij,jk,bk->bi", {A, reshape(arange(20.0, f64), {4, 5}) * 0.1,
                                       reshape(arange(10.0, f64), {2, 5})}),
              {88, 256, 424, 1937, 2485, 3033});

  // One operand: transpose, sums, traces and diagonals (repeated letters).
  check_close(einsum("ij->ji", {a}), {0, 3, 1, 4, 2, 5});
  check_close(einsum("ij->", {a}), {15});
  check_close(einsum("ij->j", {a}), {3, 5, 7});
  const Array sq = reshape(arange(9.0, f64), {3, 3});
  check_close(einsum("ii", {sq}), {12});
  check_close(einsum("ii->i", {sq}), {0, 4, 8});
  check_close(einsum("ij,jj->i", {a, sq}), {0 * 0 + 1 * 4 + 2 * 8, 3 * 0 + 4 * 4 + 5 * 8});

  check_close(einsum("i,j->ij", {array<double>({1, 2}), array<double>({3, 4, 5})}),
              {3, 4, 5, 6, 8, 10});
  check_close(einsum("i,i", {array<float>({1, 2, 3}), array<float>({4, 5, 6})}), {32});
  check_close(
      einsum("ba,bc", {reshape(arange(6.0, f64), {3, 2}), reshape(arange(12.0, f64), {3, 4})}),
      {40, 46, 52, 58, 52, 61, 70, 79});
  // Integer operands multiply and sum (no integer matmul).
  CHECK(einsum("ij,jk->ik", {astype(a, i32), astype(b, i32)}).to_vector<I>() ==
        std::vector<I>{20, 23, 26, 29, 56, 68, 80, 92});
  CHECK(einsum("bij,bjk->bik", {astype(A, i32), astype(B * 2.0, i32)}).shape() == Shape{2, 3, 5});
  // Size 0: a contraction over nothing is 0.
  check_close(einsum("ij,jk->ik", {zeros({2, 0}, f64), zeros({0, 3}, f64)}),
              std::vector<double>(6, 0));
  CHECK(einsum("ij,jk->ik", {zeros({0, 2}), zeros({2, 3})}).shape() == Shape{0, 3});
}

TEST_CASE("composite einsum contracts f16 operands as one f16 matmul") {
  // The matmul rounds each output once; multiplying then summing would round
  // every product to f16 first, and some of these 15 sums of 40 would differ.
  const Array a = astype(random::normal(random::key(3), {3, 40}), f16);
  const Array b = astype(random::normal(random::key(4), {40, 5}), f16);
  const Array r = einsum("ij,jk->ik", {a, b});
  CHECK(r.dtype() == f16);
  CHECK(astype(r, f32).to_vector<float>() ==
        astype(matmul(a, b), f32).to_vector<float>());
}

TEST_CASE("composite einsum gradients match finite differences") {
  const Array b = test_matrix(3, 4);
  check_fd(
      [&](const Array& v) {
        return weighted(einsum("ij,jk->ik", {v, b}));
      },
      test_matrix(2, 3));
  check_fd(
      [&](const Array& v) {
        return weighted(einsum("ij,jk->ki", {b, v}));
      },
      test_matrix(4, 2));
  const Array batch = reshape(test_matrix(6, 4), {2, 3, 4});
  check_fd(
      [&](const Array& v) {
        return weighted(einsum("bij,bjk->bik", {batch, reshape(v, {2, 4, 2})}));
      },
      test_matrix(8, 2));
  check_fd([&](const Array& v) { return weighted(einsum("ii->i", {v})); }, test_matrix(3, 3));
  check_fd(
      [&](const Array& v) {
        return einsum("ij,jk,ki", {v, b, test_matrix(4, 2)});
      },
      test_matrix(2, 3));
}

TEST_CASE("composite einsum errors name the problem") {
  const Array a = zeros({2, 3});
  const Array b = zeros({4, 5});
  CHECK_THROWS_WITH_AS(
      einsum("ij,jk->ik", {a, b}),
      doctest::Contains("[einsum] letter 'j' has size 3 in operand 0 (shape (2, 3)) "
                        "but size 4 in operand 1 (shape (4, 5))"),
      ShapeError);
  CHECK_THROWS_WITH_AS(einsum("ijk->i", {a}),
                       doctest::Contains("[einsum] operand 0 has shape (2, 3) (rank 2) but its "
                                         "subscripts \"ijk\" name 3 axes"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(einsum("ij,jk->ik", {a}),
                       "[einsum] \"ij,jk->ik\" names 2 operands but 1 were given", ValueError);
  CHECK_THROWS_WITH_AS(einsum("ij->iz", {a}),
                       "[einsum] output letter 'z' is in no operand of \"ij->iz\"", ValueError);
  CHECK_THROWS_WITH_AS(einsum("ij->ii", {a}),
                       "[einsum] output letter 'i' appears more than once in \"ij->ii\"",
                       ValueError);
  CHECK_THROWS_WITH_AS(einsum("...j->j", {a}),
                       doctest::Contains("[einsum] ellipsis ('...') is not supported"), ValueError);
  CHECK_THROWS_WITH_AS(einsum("i1->i", {a}), doctest::Contains("[einsum] invalid character '1'"),
                       ValueError);
  CHECK_THROWS_WITH_AS(
      einsum("ij,jk->ik", {a, zeros({3, 2}, f64)}),
      doctest::Contains("[einsum] operand 1 has dtype f64 but operand 0 has dtype f32"),
      DTypeError);
  CHECK_THROWS_WITH_AS(einsum("i,i,i,i", {zeros({1}), zeros({1}), zeros({1}), zeros({1})}),
                       "[einsum] takes 1 to 3 operands, got 4", ValueError);
  CHECK_THROWS_WITH_AS(einsum("ii", {a}),
                       doctest::Contains("[einsum] letter 'i' has size 2 in operand 0"),
                       ShapeError);
}

// ---- under filter_jit ----

TEST_CASE("composite ops give their eager values when jitted and fused") {
  auto body = [](const Array& x) {
    return std::vector<Array>{tril(x, 1),
                              pad(x, {{1, 2}, {2, 1}}, "reflect"),
                              flip(roll(x, 1, 0), 1),
                              logsumexp(x * 2.0, 1),
                              var(x, 0, 1),
                              mod(x, 0.75),
                              count_nonzero(x > 0.0, 1),
                              einsum("ij,kj->ik", {x, x})};
  };
  auto jitted = filter_jit(body);
  for (int call = 0; call < 2; ++call) {
    CAPTURE(call);
    const Array x = test_matrix(3, 4) * (1.0 + call);
    const std::vector<Array> eager = body(x);
    const std::vector<Array> jit = jitted(x);
    REQUIRE(jit.size() == eager.size());
    for (std::size_t i = 0; i < eager.size(); ++i) {
      CAPTURE(i);
      CHECK(jit[i].shape() == eager[i].shape());
      check_close(jit[i], as_doubles(eager[i]), 1e-12);
    }
  }
}

TEST_CASE("rem is jax.lax.rem: truncated, the dividend's sign, XLA's integer edge cases") {
  const I lo = std::numeric_limits<I>::min();
  CHECK(rem(array<I>({7, -7, 7, -7, 5, lo, 3, 0}), array<I>({3, 3, -3, -3, 0, -1, 5, 4}))
            .to_vector<I>() == std::vector<I>{1, -1, 1, -1, 5, 0, 3, 0});
  CHECK(rem(array<std::uint32_t>({7, 5}), array<std::uint32_t>({3, 0})).to_vector<std::uint32_t>() ==
        std::vector<std::uint32_t>{1, 5});
  const Array a = array<float>({5.5f, -5.5f, 5.5f, 1.0f, INFINITY, 1.0f, -4.0f, NAN, 0.75f});
  const Array b = array<float>({2.0f, 2.0f, -2.0f, 0.0f, 2.0f, INFINITY, 2.0f, 1.0f, 0.25f});
  const Array r = rem(a, b);
  check_close(r, {1.5, -1.5, 1.5, kNaN, kNaN, 1.0, 0.0, kNaN, 0.0});
  const std::vector<float> rv = r.to_vector<float>();
  CHECK(std::signbit(rv[6]));   // -4 rem 2 is -0, as fmod
  CHECK(!std::signbit(rv[8]));  // 0.75 rem 0.25 is +0
  CHECK(rem(a, 2.0f).to_vector<float>()[1] == -1.5f);  // a scalar divisor
  // Gradients (JAX's rule): 1 for the dividend, -trunc(a / b) for the divisor.
  const Array x = array<float>({5.5f, -7.0f}), y = array<float>({2.0f, 3.0f});
  const Array ga = grad([&](const Array& v) { return sum(rem(v, y)); })(x);
  const Array gb = grad([&](const Array& v) { return sum(rem(x, v)); })(y);
  CHECK(ga.to_vector<float>() == std::vector<float>{1, 1});
  CHECK(gb.to_vector<float>() == std::vector<float>{-2, 2});
  CHECK_THROWS_WITH_AS(rem(array<float>({1}), array<I>({1})),
                       doctest::Contains("[rem] dtype mismatch: f32 and i32"), DTypeError);
}

TEST_CASE("shift_right_arithmetic fills with the sign bit, of u32's bit pattern too") {
  const I lo = std::numeric_limits<I>::min();
  CHECK(shift_right_arithmetic(array<I>({-8, 8, -1, lo, 5, -5, -5}), array<I>({1, 1, 31, 31, 32, 40, -1}))
            .to_vector<I>() == std::vector<I>{-4, 4, -1, -1, 0, -1, -1});
  CHECK(shift_right_arithmetic(array<std::uint32_t>({0x80000000u, 0x7fffffffu, 0xf0000000u}),
                               array<std::uint32_t>({4, 4, 33}))
            .to_vector<std::uint32_t>() ==
        std::vector<std::uint32_t>{0xf8000000u, 0x07ffffffu, 0xffffffffu});
  CHECK(shift_right_arithmetic(array<I>({-64}), 3).to_vector<I>() == std::vector<I>{-8});
}
