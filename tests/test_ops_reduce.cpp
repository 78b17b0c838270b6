// Reductions: sum/mean/max/min over one, several, negative and all axes,
// keepdims, empty extents, NaN handling, argmax/argmin ties, and every error
// message. Arrays are created on the default device, so this runs on every
// backend.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <kiln/kiln.hpp>
#include <limits>
#include <numeric>
#include <vector>

using namespace kiln;

namespace {

using I32 = std::int32_t;
using U32 = std::uint32_t;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// 0, 1, ..., 23 as a (2, 3, 4) array of `dtype`.
Array iota234(DType dtype) {
  std::vector<double> v(24);
  std::iota(v.begin(), v.end(), 0.0);
  return astype(array(v, Shape{2, 3, 4}), dtype);
}

std::vector<double> as_doubles(const Array& a) {
  return astype(a, f64).to_vector<double>();
}

void check_close(const Array& a, const std::vector<double>& expected) {
  const std::vector<double> got = as_doubles(a);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    if (std::isnan(expected[i])) {
      CHECK(std::isnan(got[i]));
    } else {
      CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-6));
    }
  }
}

}  // namespace

TEST_CASE("sum over one axis, several axes, negative axes and all axes") {
  for (DType dt : {f32, f64, i32, u32}) {
    CAPTURE(dt);
    const Array x = iota234(dt);
    Array s = sum(x);
    CHECK(s.dtype() == dt);
    CHECK(s.shape() == Shape{});
    CHECK(as_doubles(s) == std::vector<double>{276});
    s = sum(x, 0);
    CHECK(s.shape() == Shape{3, 4});
    CHECK(as_doubles(s) ==
          std::vector<double>{12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34});
    s = sum(x, 1);
    CHECK(s.shape() == Shape{2, 4});
    CHECK(as_doubles(s) == std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57});
    s = sum(x, -1);
    CHECK(s.shape() == Shape{2, 3});
    CHECK(as_doubles(s) == std::vector<double>{6, 22, 38, 54, 70, 86});
    s = sum(x, {0, 2});
    CHECK(s.shape() == Shape{3});
    CHECK(as_doubles(s) == std::vector<double>{60, 92, 124});
    CHECK(as_doubles(sum(x, {-1, 0})) == std::vector<double>{60, 92, 124});
    s = sum(x, {0, 1});
    CHECK(s.shape() == Shape{4});
    CHECK(as_doubles(s) == std::vector<double>{60, 66, 72, 78});
    CHECK(as_doubles(sum(x, {0, 1, 2})) == std::vector<double>{276});
  }
}

TEST_CASE("keepdims keeps reduced axes as size 1") {
  const Array x = iota234(f32);
  CHECK(sum(x, 1, true).shape() == Shape{2, 1, 4});
  CHECK(as_doubles(sum(x, 1, true)) ==
        std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57});
  CHECK(sum(x, {}, true).shape() == Shape{1, 1, 1});
  CHECK(max(x, {0, 2}, true).shape() == Shape{1, 3, 1});
  CHECK(as_doubles(max(x, {0, 2}, true)) == std::vector<double>{15, 19, 23});
  CHECK(mean(x, -1, true).shape() == Shape{2, 3, 1});
  // keepdims results broadcast back against the input: x - max(x, -1,
  // keepdims).
  const Array centered = x - max(x, -1, true);
  CHECK(as_doubles(centered)[0] == -3);
  CHECK(as_doubles(centered)[23] == 0);
}

TEST_CASE(
    "an empty axis list reduces nothing and a 0-d array reduces to itself") {
  const Array x = iota234(i32);
  // (An empty initializer list: copying an empty Axes trips a GCC 12
  // -Wmaybe-uninitialized false positive inside absl::InlinedVector at -O1.)
  const Array s = sum(x, AxisArg(std::initializer_list<std::int64_t>{}));
  CHECK(s.shape() == Shape{2, 3, 4});
  CHECK(as_doubles(s) == as_doubles(x));
  const Array five = scalar<I32>(5);
  CHECK(sum(five).item<I32>() == 5);
  CHECK(max(five).item<I32>() == 5);
  CHECK(sum(five).shape() == Shape{});
  // size-1 axes reduce to a copy
  const Array col = array(std::vector<float>{1, 2, 3}, Shape{3, 1});
  CHECK(as_doubles(sum(col, 1)) == std::vector<double>{1, 2, 3});
}

TEST_CASE("mean divides the sum by the number of reduced elements") {
  for (DType dt : {f32, f64}) {
    CAPTURE(dt);
    const Array x = iota234(dt);
    CHECK(mean(x).dtype() == dt);
    check_close(mean(x), {11.5});
    check_close(mean(x, 0), {6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
    check_close(mean(x, -1), {1.5, 5.5, 9.5, 13.5, 17.5, 21.5});
    check_close(mean(x, {0, 2}), {7.5, 11.5, 15.5});
  }
}

TEST_CASE("max and min over axes for every dtype") {
  for (DType dt : {f32, f64, i32, u32}) {
    CAPTURE(dt);
    const Array x = iota234(dt);
    CHECK(max(x).dtype() == dt);
    CHECK(as_doubles(max(x)) == std::vector<double>{23});
    CHECK(as_doubles(min(x)) == std::vector<double>{0});
    CHECK(as_doubles(max(x, 1)) ==
          std::vector<double>{8, 9, 10, 11, 20, 21, 22, 23});
    CHECK(as_doubles(min(x, 1)) ==
          std::vector<double>{0, 1, 2, 3, 12, 13, 14, 15});
    CHECK(as_doubles(max(x, {0, 2})) == std::vector<double>{15, 19, 23});
    CHECK(as_doubles(min(x, {-1, -3})) == std::vector<double>{0, 4, 8});
  }
  const Array neg = array(std::vector<I32>{-5, -2, -9, -2}, Shape{2, 2});
  CHECK(max(neg).item<I32>() == -2);
  CHECK(min(neg, 0).to_vector<I32>() == std::vector<I32>{-9, -2});
  const Array big = array(std::vector<U32>{4000000000u, 3}, Shape{2});
  CHECK(max(big).item<U32>() == 4000000000u);
  // max/min of bool are any/all
  const Array b =
      array(std::vector<bool>{true, false, false, false}, Shape{2, 2});
  CHECK(max(b, 1).to_vector<bool>() == std::vector<bool>{true, false});
  CHECK(min(b, 0).to_vector<bool>() == std::vector<bool>{false, false});
  CHECK(max(b).item<bool>());
}

TEST_CASE("max and min propagate NaN; infinities are ordinary values") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const Array x = array(std::vector<float>{1, nan, 3, 4, 5, 6}, Shape{2, 3});
  CHECK(std::isnan(max(x).item<float>()));
  CHECK(std::isnan(min(x).item<float>()));
  check_close(max(x, 1), {kNaN, 6});
  check_close(min(x, 0), {1, kNaN, 3});
  CHECK(max(array(std::vector<float>{-inf, -inf}, Shape{2})).item<float>() ==
        -inf);
  CHECK(min(array(std::vector<float>{inf, inf}, Shape{2})).item<float>() ==
        inf);
  CHECK(sum(array(std::vector<float>{inf, 1}, Shape{2})).item<float>() == inf);
}

TEST_CASE("short reduced rows (a pool window's last axis) across many outputs, NaN in any place") {
  // 301 rows of 2 and of 5: the CPU folds blocks of 128 rows side by side, so
  // this crosses blocks and ends in a partial one.
  for (const std::int64_t n : {2, 5}) {
    CAPTURE(n);
    const std::int64_t rows = 301;
    std::vector<float> v(static_cast<std::size_t>(rows * n));
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<float>((static_cast<int>(i) * 37 % 23) - 11) * 0.5f;
    }
    v[static_cast<std::size_t>(7 * n)] = std::numeric_limits<float>::quiet_NaN();          // first
    v[static_cast<std::size_t>(200 * n + n - 1)] = std::numeric_limits<float>::quiet_NaN();  // last
    const Array x = array(v, Shape{rows, n});
    std::vector<double> mx, mn, sm;
    for (std::int64_t r = 0; r < rows; ++r) {
      double hi = -kInf, lo = kInf, total = 0;
      bool nan = false;
      for (std::int64_t k = 0; k < n; ++k) {
        const double e = v[static_cast<std::size_t>(r * n + k)];
        nan = nan || std::isnan(e);
        hi = std::max(hi, e);
        lo = std::min(lo, e);
        total += e;
      }
      mx.push_back(nan ? kNaN : hi);
      mn.push_back(nan ? kNaN : lo);
      sm.push_back(total);
    }
    check_close(max(x, 1), mx);
    check_close(min(x, 1), mn);
    check_close(sum(x, 1), sm);
  }
}

TEST_CASE("sums stay in the input dtype; i32 sums wrap modulo 2^32") {
  const Array x =
      array(std::vector<I32>{std::numeric_limits<I32>::max(), 1}, Shape{2});
  CHECK(sum(x).item<I32>() == std::numeric_limits<I32>::min());
  CHECK(sum(x).dtype() == i32);
}

TEST_CASE("long reductions are exact for exactly representable sums") {
  // Long enough for the lane-parallel path, with a tail that is not a multiple
  // of the lane count.
  const std::int64_t n = 5003;
  CHECK(sum(ones({n})).item<float>() == 5003.0f);
  CHECK(sum(arange(n, f64)).item<double>() == 5003.0 * 5002.0 / 2);
  CHECK(sum(arange(n, i32)).item<I32>() == 5003 * 5002 / 2);
  CHECK(max(arange(n, i32)).item<I32>() == 5002);
  CHECK(min(arange(n, f32) - 7.0f).item<float>() == -7.0f);
  check_close(mean(ones({3, n}), 1), {1, 1, 1});
  // NaN in the middle of a long array still wins
  std::vector<float> v(static_cast<std::size_t>(n), 1.0f);
  v[2500] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(max(array(v, Shape{n})).item<float>()));
  CHECK(argmax(array(v, Shape{n})).item<I32>() == 2500);
}

// Reference reduction with explicit index arithmetic, for the multi-axis cases.
std::vector<double> sum_reference(const std::vector<double>& x,
                                  const Shape& shape,
                                  const std::vector<bool>& reduced) {
  Shape out_shape;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) out_shape.push_back(shape[d]);
  }
  std::vector<double> out(static_cast<std::size_t>(numel(out_shape)), 0.0);
  Shape idx(shape.size(), 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::int64_t rem = static_cast<std::int64_t>(i);
    for (std::size_t d = shape.size(); d-- > 0;) {
      idx[d] = rem % shape[d];
      rem /= shape[d];
    }
    std::int64_t o = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (!reduced[d]) o = o * shape[d] + idx[d];
    }
    out[static_cast<std::size_t>(o)] += x[i];
  }
  return out;
}

TEST_CASE("reductions over interleaved axes match an explicit reference") {
  const std::vector<std::pair<Shape, std::vector<bool>>> cases{
      {{3, 50, 20},
       {false, true, false}},  // rows of 20: vectorized accumulation
      {{3, 50, 2}, {false, true, false}},  // rows of 2: element by element
      {{2, 3, 4, 5}, {true, false, true, false}},
      {{2, 3, 4, 5}, {false, true, false, true}},
      {{2, 1, 3, 1, 4}, {true, true, false, true, true}},
      {{600, 3}, {true, false}},
  };
  for (const auto& [shape, reduced] : cases) {
    CAPTURE(to_string(shape));
    std::vector<double> x(static_cast<std::size_t>(numel(shape)));
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<double>((i * 7) % 11);
    Axes axes;
    for (std::size_t d = 0; d < reduced.size(); ++d) {
      if (reduced[d]) axes.push_back(static_cast<std::int64_t>(d));
    }
    const std::vector<double> expected = sum_reference(x, shape, reduced);
    CHECK(sum(array(x, shape), axes).to_vector<double>() == expected);
    CHECK(as_doubles(sum(astype(array(x, shape), i32), axes)) == expected);
  }
}

TEST_CASE(
    "empty reductions: sum gives 0, mean NaN, max and min have no identity") {
  CHECK(sum(zeros({0})).item<float>() == 0.0f);
  CHECK(sum(zeros({0}, i32)).item<I32>() == 0);
  CHECK(as_doubles(sum(zeros({2, 0}), 1)) == std::vector<double>{0, 0});
  CHECK(as_doubles(sum(zeros({0, 3}), 0)) == std::vector<double>{0, 0, 0});
  CHECK(sum(zeros({0, 3}), 1).shape() == Shape{0});
  CHECK(std::isnan(mean(zeros({0})).item<float>()));
  check_close(mean(zeros({2, 0}, f64), 1), {kNaN, kNaN});
  // Reducing a non-empty axis of an empty array is fine: there is nothing to
  // do.
  CHECK(max(zeros({0, 3}), 1).shape() == Shape{0});
  CHECK_THROWS_WITH_AS(max(zeros({0})),
                       "[max] cannot reduce over axis 0 of shape (0,): it is "
                       "empty and max has no "
                       "identity",
                       ShapeError);
  CHECK_THROWS_WITH_AS(
      min(zeros({0, 3}), 0),
      doctest::Contains("[min] cannot reduce over axis 0 of shape (0, 3)"),
      ShapeError);
}

TEST_CASE("argmax and argmin of the flattened array and along an axis") {
  const Array x = array(std::vector<float>{3, 9, 2, 7, 1, 8}, Shape{2, 3});
  CHECK(argmax(x).dtype() == i32);
  CHECK(argmax(x).shape() == Shape{});
  CHECK(argmax(x).item<I32>() == 1);
  CHECK(argmin(x).item<I32>() == 4);
  CHECK(argmax(x, 0).to_vector<I32>() == std::vector<I32>{1, 0, 1});
  CHECK(argmin(x, 0).to_vector<I32>() == std::vector<I32>{0, 1, 0});
  CHECK(argmax(x, 1).to_vector<I32>() == std::vector<I32>{1, 2});
  CHECK(argmax(x, -1).to_vector<I32>() == std::vector<I32>{1, 2});
  CHECK(argmin(x, 1).to_vector<I32>() == std::vector<I32>{2, 1});
  CHECK(argmax(x, 1, true).shape() == Shape{2, 1});
  CHECK(argmax(x, 1, true).to_vector<I32>() == std::vector<I32>{1, 2});
  // middle axis of a 3-D array
  const Array y = iota234(i32);
  CHECK(argmax(y, 1).to_vector<I32>() == std::vector<I32>(8, 2));
  CHECK(argmin(y, 1).to_vector<I32>() == std::vector<I32>(8, 0));
  CHECK(argmax(scalar(4.0f)).item<I32>() == 0);
  CHECK(argmax(array(std::vector<U32>{1, 4000000000u}, Shape{2})).item<I32>() ==
        1);
  CHECK(argmax(array(std::vector<bool>{false, true, true}, Shape{3}))
            .item<I32>() == 1);
}

TEST_CASE(
    "argmax and argmin pick the first occurrence of ties, and the first NaN") {
  const Array t = array(std::vector<I32>{5, 1, 5, 1, 5}, Shape{5});
  CHECK(argmax(t).item<I32>() == 0);
  CHECK(argmin(t).item<I32>() == 1);
  const Array m = array(std::vector<float>{2, 2, 0, 0}, Shape{2, 2});
  CHECK(argmax(m, 1).to_vector<I32>() == std::vector<I32>{0, 0});
  CHECK(argmin(m, 0).to_vector<I32>() == std::vector<I32>{1, 1});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Array n = array(std::vector<float>{1, nan, 9, nan}, Shape{4});
  CHECK(argmax(n).item<I32>() == 1);
  CHECK(argmin(n).item<I32>() == 1);
}

TEST_CASE("argmax and argmin errors: empty arrays and axes out of range") {
  CHECK_THROWS_WITH_AS(
      argmax(zeros({0})),
      doctest::Contains("[argmax] of an empty array (shape (0,))"), ShapeError);
  CHECK_THROWS_WITH_AS(
      argmin(zeros({2, 0}), 1),
      doctest::Contains("[argmin] cannot reduce over axis 1 of shape (2, 0)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(argmax(zeros({2, 3}), 2),
                       "[argmax] axis 2 is out of range for an array of rank 2",
                       ShapeError);
  CHECK_THROWS_WITH_AS(argmax(Array()),
                       "[argmax] argument 1 is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
  CHECK_THROWS_WITH_AS(argmin(Array(), 0),
                       "[argmin] argument 1 is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
}

TEST_CASE("reduction errors name the op, the dtype or axes, and the shape") {
  const Array b = array(std::vector<bool>{true, false}, Shape{2});
  CHECK_THROWS_WITH_AS(
      sum(b),
      "[sum] requires a numeric dtype, got bool for an operand of shape (2,); "
      "to count true values use sum(astype(x, i32))",
      DTypeError);
  CHECK_THROWS_WITH_AS(mean(zeros({2, 2}, i32)),
                       "[mean] requires a floating dtype, got i32 for an "
                       "operand of shape (2, 2); "
                       "convert with astype(x, f32)",
                       DTypeError);
  CHECK_THROWS_WITH_AS(sum(zeros({2, 3, 4}), 3),
                       "[sum] axis 3 is out of range for an array of rank 3",
                       ShapeError);
  CHECK_THROWS_WITH_AS(max(zeros({2, 3}), {-3}),
                       "[max] axis -3 is out of range for an array of rank 2",
                       ShapeError);
  CHECK_THROWS_WITH_AS(min(zeros({2, 3}), {1, -1}),
                       doctest::Contains("[min] repeated axis"), ShapeError);
  CHECK_THROWS_WITH_AS(mean(zeros({2}), 1),
                       doctest::Contains("[mean] axis 1 is out of range"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(sum(Array()), "[sum] argument 1 is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
  CHECK_THROWS_WITH_AS(mean(Array()),
                       "[mean] argument 1 is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)", ValueError);
}

TEST_CASE("prod multiplies over axes; an empty product is 1; i32 wraps") {
  Array a = array<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(prod(a).item<float>() == 720.0f);
  CHECK(prod(a, 0).to_vector<float>() == std::vector<float>{4, 10, 18});
  CHECK(prod(a, 1, true).shape() == Shape{2, 1});
  CHECK(prod(a, 1, true).to_vector<float>() == std::vector<float>{6, 120});
  CHECK(prod(zeros({0, 3}), 0).to_vector<float>() == std::vector<float>{1, 1, 1});
  // 65536 * 65536 wraps to 0 in i32, as numpy's int32 product does.
  CHECK(prod(array<std::int32_t>({65536, 65536, 7})).item<std::int32_t>() == 0);
  CHECK_THROWS_WITH_AS(prod(array<bool>({true})), doctest::Contains("[prod] requires a numeric dtype"),
                       DTypeError);
}

TEST_CASE("cumsum and cumprod scan along an axis, forward or from the end") {
  Array a = array<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(cumsum(a, 1).to_vector<float>() == std::vector<float>{1, 3, 6, 4, 9, 15});
  CHECK(cumsum(a, 0).to_vector<float>() == std::vector<float>{1, 2, 3, 5, 7, 9});
  CHECK(cumsum(a, -1, true).to_vector<float>() == std::vector<float>{6, 5, 3, 15, 11, 6});
  CHECK(cumprod(a, 1).to_vector<float>() == std::vector<float>{1, 2, 6, 4, 20, 120});
  CHECK(cumprod(a, 0, true).to_vector<float>() == std::vector<float>{4, 10, 18, 4, 5, 6});
  // Without an axis: the flattened array (jnp.cumsum(a)).
  CHECK(cumsum(a).shape() == Shape{6});
  CHECK(cumsum(a).to_vector<float>() == std::vector<float>{1, 3, 6, 10, 15, 21});
  // bool counts as i32; i32 wraps.
  CHECK(cumsum(array<bool>({true, false, true})).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{1, 1, 2});
  CHECK(cumsum(array<std::int32_t>({2147483647, 1})).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{2147483647, -2147483648});
  CHECK(cumsum(zeros({0, 2}), 0).shape() == Shape{0, 2});
  // -0.0 stays -0.0 at the start of a scan (it is copied, not added to 0).
  CHECK(std::signbit(cumsum(array<float>({-0.0f, 1.0f}), 0).to_vector<float>()[0]));
  CHECK_THROWS_WITH_AS(cumsum(a, 2), doctest::Contains("[cumsum]"), Error);
}

TEST_CASE("the gradients of prod and cumprod are exact at zeros") {
  // d/dx prod([2, 0, 3]) = [0, 6, 0]; with two zeros, all 0.
  auto p = [](const Array& x) { return prod(x); };
  CHECK(grad(p)(array<float>({2, 0, 3})).to_vector<float>() == std::vector<float>{0, 6, 0});
  CHECK(grad(p)(array<float>({0, 2, 0})).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(grad(p)(array<float>({2, 4, 3})).to_vector<float>() == std::vector<float>{12, 6, 8});
  // cumprod([2, 0, 3]) = [2, 0, 0]; d sum / dx = [1 + 0 + 0, 2 + 2*3, 0].
  auto c = [](const Array& x) { return sum(cumprod(x, 0)); };
  CHECK(grad(c)(array<float>({2, 0, 3})).to_vector<float>() == std::vector<float>{1, 8, 0});
  auto cs = [](const Array& x) { return sum(cumsum(x, 0) * array<float>({1, 10, 100})); };
  CHECK(grad(cs)(array<float>({5, 6, 7})).to_vector<float>() == std::vector<float>{111, 110, 100});
}
