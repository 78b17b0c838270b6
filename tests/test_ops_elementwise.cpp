// Elementwise ops: values for every dtype they accept, broadcasting, scalar
// operands, defined integer edge cases, NaN handling and every error message.
// Arrays are created on the default device, so this runs on every backend.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <kiln/runtime/half.hpp>
#include <cstdint>
#include <kiln/dsl/unary_math.hpp>
#include <kiln/kiln.hpp>
#include <limits>
#include <string>
#include <vector>

using namespace kiln;

namespace {

using I32 = std::int32_t;
using U32 = std::uint32_t;
constexpr I32 kIntMin = std::numeric_limits<I32>::min();
constexpr I32 kIntMax = std::numeric_limits<I32>::max();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

template <class T>
std::vector<T> values(const Array& a) {
  return a.to_vector<T>();
}

// Compares a floating array with expected values (NaN matches NaN) to ~1e-6.
void check_close(const Array& a, const std::vector<double>& expected) {
  REQUIRE(is_inexact(a.dtype()));
  std::vector<double> got;
  if (a.dtype() == f32) {
    for (float v : a.to_vector<float>()) got.push_back(v);
  } else {
    got = a.to_vector<double>();
  }
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    if (std::isnan(expected[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(expected[i])) {
      CHECK(got[i] == expected[i]);
    } else {
      CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-6));
    }
  }
}

// 1-D arrays of each dtype from a literal list.
template <class T>
Array vec(std::vector<T> v) {
  return array(v, Shape{static_cast<std::int64_t>(v.size())});
}
Array f32s(std::vector<float> v) { return vec(std::move(v)); }
Array f64s(std::vector<double> v) { return vec(std::move(v)); }
Array i32s(std::vector<I32> v) { return vec(std::move(v)); }
Array u32s(std::vector<U32> v) { return vec(std::move(v)); }
Array bools(std::vector<bool> v) { return vec(std::move(v)); }

}  // namespace

// ---- arithmetic ----

TEST_CASE("add, subtract, multiply and divide f32 and f64 elementwise") {
  for (DType dt : {f32, f64}) {
    CAPTURE(dt);
    const Array a = astype(f32s({1.5f, -2, 0, 8}), dt);
    const Array b = astype(f32s({0.5f, 4, -3, -0.25f}), dt);
    CHECK(add(a, b).dtype() == dt);
    check_close(add(a, b), {2, 2, -3, 7.75});
    check_close(subtract(a, b), {1, -6, 3, 8.25});
    check_close(multiply(a, b), {0.75, -8, 0, -2});
    check_close(divide(a, b), {3, -0.5, 0, -32});
    check_close(a + b, {2, 2, -3, 7.75});
    check_close(a - b, {1, -6, 3, 8.25});
    check_close(a * b, {0.75, -8, 0, -2});
    check_close(a / b, {3, -0.5, 0, -32});
  }
}

TEST_CASE("float division by zero follows IEEE: inf, -inf and nan") {
  check_close(f32s({1, -1, 0}) / f32s({0, 0, 0}), {kInf, -kInf, kNaN});
}

TEST_CASE("add, subtract, multiply and divide i32 and u32 elementwise") {
  const Array a = i32s({7, -7, 100, 0});
  const Array b = i32s({2, 3, -7, 5});
  CHECK(values<I32>(a + b) == std::vector<I32>{9, -4, 93, 5});
  CHECK(values<I32>(a - b) == std::vector<I32>{5, -10, 107, -5});
  CHECK(values<I32>(a * b) == std::vector<I32>{14, -21, -700, 0});
  CHECK(values<I32>(a / b) == std::vector<I32>{3, -2, -14, 0});
  const Array c = u32s({7, 4000000000u, 9});
  const Array d = u32s({2, 2, 10});
  CHECK(values<U32>(c + d) == std::vector<U32>{9, 4000000002u, 19});
  CHECK(values<U32>(c - d) == std::vector<U32>{5, 3999999998u, 4294967295u});
  CHECK(values<U32>(c * d) ==
        std::vector<U32>{14, 3705032704u, 90});  // 8e9 mod 2^32
  CHECK(values<U32>(c / d) == std::vector<U32>{3, 2000000000u, 0});
}

TEST_CASE("integer division rounds toward zero and x / 0 gives 0") {
  CHECK(values<I32>(i32s({7, -7, 7, -7, 5, -5, 0}) /
                    i32s({2, 2, -2, -2, 0, 0, 0})) ==
        std::vector<I32>{3, -3, -3, 3, 0, 0, 0});
  CHECK(values<I32>(i32s({kIntMin, kIntMin}) / i32s({-1, 1})) ==
        std::vector<I32>{kIntMin, kIntMin});  // the overflowing quotient wraps
  CHECK(values<U32>(u32s({7, 5}) / u32s({2, 0})) == std::vector<U32>{3, 0});
}

TEST_CASE("i32 arithmetic wraps modulo 2^32 instead of overflowing") {
  CHECK(values<I32>(i32s({kIntMax}) + i32s({1})) == std::vector<I32>{kIntMin});
  CHECK(values<I32>(i32s({kIntMin}) - i32s({1})) == std::vector<I32>{kIntMax});
  CHECK(values<I32>(i32s({65536, -65536}) * i32s({65536, 65537})) ==
        std::vector<I32>{0, -65536});
  CHECK(values<I32>(neg(i32s({kIntMin, 5}))) == std::vector<I32>{kIntMin, -5});
  CHECK(values<I32>(abs(i32s({kIntMin, -5, 5}))) ==
        std::vector<I32>{kIntMin, 5, 5});
}

TEST_CASE("power raises floating bases elementwise") {
  check_close(power(f32s({2, 9, 4, -2}), f32s({3, 0.5f, -1, 2})),
              {8, 3, 0.25, 4});
  check_close(power(f64s({2, 0}), f64s({10, 0})), {1024, 1});
  // IEEE special cases, as std::pow and numpy.power
  check_close(power(f32s({0, 1, static_cast<float>(kNaN),
                          static_cast<float>(kInf), 0, -8}),
                    f32s({0, static_cast<float>(kNaN), 0, 0, -1, 1.0f / 3})),
              {1, 1, 1, 1, kInf, kNaN});
  check_close(power(f32s({2, 3}), 2), {4, 9});
}

// ---- unary ----

TEST_CASE("neg, abs and relu on f32, f64, i32 and u32") {
  check_close(-f32s({1.5f, -2, 0}), {-1.5, 2, 0});
  check_close(abs(f64s({1.5, -2, -0.0})), {1.5, 2, 0});
  check_close(relu(f32s({1.5f, -2, 0})), {1.5, 0, 0});
  CHECK(values<I32>(-i32s({3, -4})) == std::vector<I32>{-3, 4});
  CHECK(values<I32>(relu(i32s({3, -4, 0}))) == std::vector<I32>{3, 0, 0});
  CHECK(values<U32>(neg(u32s({1, 0}))) == std::vector<U32>{4294967295u, 0});
  CHECK(values<U32>(abs(u32s({7}))) == std::vector<U32>{7});
  CHECK(values<U32>(relu(u32s({7, 0}))) == std::vector<U32>{7, 0});
}

TEST_CASE("exp, log, tanh, sqrt, rsqrt and sigmoid match the math library") {
  for (DType dt : {f32, f64}) {
    CAPTURE(dt);
    const Array x = astype(f32s({0.5f, 1, 2, 4}), dt);
    check_close(exp(x),
                {std::exp(0.5), std::exp(1.0), std::exp(2.0), std::exp(4.0)});
    check_close(log(x), {std::log(0.5), 0, std::log(2.0), std::log(4.0)});
    check_close(tanh(x), {std::tanh(0.5), std::tanh(1.0), std::tanh(2.0),
                          std::tanh(4.0)});
    check_close(sqrt(x), {std::sqrt(0.5), 1, std::sqrt(2.0), 2});
    check_close(rsqrt(x), {1 / std::sqrt(0.5), 1, 1 / std::sqrt(2.0), 0.5});
    check_close(sigmoid(x),
                {1 / (1 + std::exp(-0.5)), 1 / (1 + std::exp(-1.0)),
                 1 / (1 + std::exp(-2.0)), 1 / (1 + std::exp(-4.0))});
  }
}

TEST_CASE("transcendental edge values: log(0), sqrt(-1), saturating sigmoid") {
  check_close(log(f32s({0, -1})), {-kInf, kNaN});
  check_close(sqrt(f32s({-1, 0})), {kNaN, 0});
  check_close(rsqrt(f32s({0})), {kInf});
  check_close(sigmoid(f32s({-1000, 1000, 0})), {0, 1, 0.5});
  check_close(tanh(f64s({-1000, 1000})), {-1, 1});
}

// ---- logical and comparisons ----

TEST_CASE(
    "logical_not, logical_and and logical_or on bool, and their operators") {
  const Array a = bools({true, true, false, false});
  const Array b = bools({true, false, true, false});
  CHECK(values<bool>(logical_not(a)) ==
        std::vector<bool>{false, false, true, true});
  CHECK(values<bool>(!a) == std::vector<bool>{false, false, true, true});
  CHECK(values<bool>(logical_and(a, b)) ==
        std::vector<bool>{true, false, false, false});
  CHECK(values<bool>(a & b) == std::vector<bool>{true, false, false, false});
  CHECK(values<bool>(logical_or(a, b)) ==
        std::vector<bool>{true, true, true, false});
  CHECK(values<bool>(a | b) == std::vector<bool>{true, true, true, false});
}

TEST_CASE("comparisons give bool for every dtype") {
  const std::vector<bool> eq{false, true, false}, ne{true, false, true},
      lt{true, false, false}, le{true, true, false}, gt{false, false, true},
      ge{false, true, true};
  const auto check_all = [&](const Array& a, const Array& b) {
    CAPTURE(a.dtype());
    CHECK((a == b).dtype() == bool_);
    CHECK(values<bool>(equal(a, b)) == eq);
    CHECK(values<bool>(a == b) == eq);
    CHECK(values<bool>(not_equal(a, b)) == ne);
    CHECK(values<bool>(a != b) == ne);
    CHECK(values<bool>(less(a, b)) == lt);
    CHECK(values<bool>(a < b) == lt);
    CHECK(values<bool>(less_equal(a, b)) == le);
    CHECK(values<bool>(a <= b) == le);
    CHECK(values<bool>(greater(a, b)) == gt);
    CHECK(values<bool>(a > b) == gt);
    CHECK(values<bool>(greater_equal(a, b)) == ge);
    CHECK(values<bool>(a >= b) == ge);
  };
  check_all(f32s({1, 2.5f, 3}), f32s({2, 2.5f, -3}));
  check_all(f64s({1, 2.5, 3}), f64s({2, 2.5, -3}));
  check_all(i32s({-5, 7, 0}), i32s({5, 7, -1}));
  check_all(u32s({1, 7, 4000000000u}), u32s({2, 7, 3}));
  check_all(bools({false, true, true}),
            bools({true, true, false}));  // false < true
}

TEST_CASE("NaN compares unequal to everything, itself included") {
  const Array x = f32s({static_cast<float>(kNaN), 1});
  CHECK(values<bool>(x == x) == std::vector<bool>{false, true});
  CHECK(values<bool>(x != x) == std::vector<bool>{true, false});
  CHECK(values<bool>(x < 2.0f) == std::vector<bool>{false, true});
}

TEST_CASE(
    "maximum and minimum for every dtype; NaN propagates from either side") {
  check_close(maximum(f32s({1, 5, -2}), f32s({3, 2, -2})), {3, 5, -2});
  check_close(minimum(f64s({1, 5, -2}), f64s({3, 2, -2})), {1, 2, -2});
  check_close(maximum(f32s({static_cast<float>(kNaN), 1}),
                      f32s({1, static_cast<float>(kNaN)})),
              {kNaN, kNaN});
  check_close(minimum(f32s({static_cast<float>(kNaN), 1}),
                      f32s({1, static_cast<float>(kNaN)})),
              {kNaN, kNaN});
  check_close(relu(f32s({static_cast<float>(kNaN)})), {kNaN});
  CHECK(values<I32>(maximum(i32s({-1, 4}), i32s({-3, 9}))) ==
        std::vector<I32>{-1, 9});
  CHECK(values<I32>(minimum(i32s({-1, 4}), i32s({-3, 9}))) ==
        std::vector<I32>{-3, 4});
  CHECK(values<U32>(maximum(u32s({4000000000u, 4}), u32s({3, 9}))) ==
        std::vector<U32>{4000000000u, 9});
  CHECK(values<bool>(maximum(bools({true, false}), bools({false, false}))) ==
        std::vector<bool>{true, false});
  CHECK(values<bool>(minimum(bools({true, true}), bools({false, true}))) ==
        std::vector<bool>{false, true});
}

// ---- where ----

TEST_CASE("where picks from a where cond is true, else from b") {
  const Array cond = bools({true, false, true});
  check_close(where(cond, f32s({1, 2, 3}), f32s({-1, -2, -3})), {1, -2, 3});
  CHECK(values<I32>(where(cond, i32s({1, 2, 3}), i32s({-1, -2, -3}))) ==
        std::vector<I32>{1, -2, 3});
  CHECK(values<bool>(where(cond, bools({false, false, false}),
                           bools({true, true, true}))) ==
        std::vector<bool>{false, true, false});
}

TEST_CASE("where broadcasts cond, a and b together") {
  // cond (2, 1), a (3,), b () -> (2, 3)
  const Array cond = array(std::vector<bool>{true, false}, Shape{2, 1});
  const Array r = where(cond, f32s({1, 2, 3}), scalar(0.5f));
  CHECK(r.shape() == Shape{2, 3});
  check_close(r, {1, 2, 3, 0.5, 0.5, 0.5});
  // relu-style mask against a scalar branch
  const Array x = f32s({-1, 2, -3, 4});
  check_close(where(x > 0.0f, x, zeros({}, f32)), {0, 2, 0, 4});
}

// ---- astype ----

TEST_CASE("astype converts between every pair of bool, i32, u32, f32 and f64") {
  const std::vector<DType> dtypes{bool_, i32, u32, f32, f64};
  // 0 and 1 survive every conversion.
  for (DType from : dtypes) {
    for (DType to : dtypes) {
      CAPTURE(from);
      CAPTURE(to);
      const Array x = astype(bools({false, true}), from);
      const Array y = astype(x, to);
      CHECK(y.dtype() == to);
      CHECK(y.shape() == Shape{2});
      CHECK(values<bool>(astype(y, bool_)) == std::vector<bool>{false, true});
      check_close(astype(y, f64), {0, 1});
    }
  }
}

TEST_CASE("astype follows C++ conversions, saturating float to integer") {
  // float -> integer truncates toward zero; NaN gives 0; out of range
  // saturates.
  const Array f =
      f32s({2.9f, -2.9f, static_cast<float>(kNaN), 1e10f, -1e10f, 0.5f});
  CHECK(values<I32>(astype(f, i32)) ==
        std::vector<I32>{2, -2, 0, kIntMax, kIntMin, 0});
  CHECK(values<U32>(astype(f, u32)) ==
        std::vector<U32>{2, 0, 0, 4294967295u, 0, 0});
  CHECK(values<I32>(astype(f64s({2147483647.5, -2147483648.7}), i32)) ==
        std::vector<I32>{kIntMax, kIntMin});
  // integer <-> integer keeps the bits (two's complement).
  CHECK(values<U32>(astype(i32s({-1, 5}), u32)) ==
        std::vector<U32>{4294967295u, 5});
  CHECK(values<I32>(astype(u32s({4294967295u, 5}), i32)) ==
        std::vector<I32>{-1, 5});
  // anything -> bool: nonzero (and NaN) is true.
  CHECK(values<bool>(
            astype(f32s({0, -0.0f, 0.1f, static_cast<float>(kNaN)}), bool_)) ==
        std::vector<bool>{false, false, true, true});
  CHECK(values<bool>(astype(i32s({0, -3}), bool_)) ==
        std::vector<bool>{false, true});
  // integers and floats to floats.
  check_close(astype(i32s({-7, 16777217}), f64), {-7, 16777217});
  check_close(astype(u32s({4294967295u}), f64), {4294967295.0});
  check_close(astype(f64s({0.1}), f32), {0.1});
  CHECK(values<float>(astype(f64s({0.1}), f32))[0] == 0.1f);
}

TEST_CASE("astype to the same dtype returns the array itself") {
  const Array a = f32s({1, 2});
  CHECK(astype(a, f32).same(a));
}

// ---- broadcasting ----

TEST_CASE("binary ops broadcast like numpy: rank promotion and size-1 dims") {
  // (3,) + (2, 3)
  const Array row = f32s({10, 20, 30});
  const Array m = array(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Array r = row + m;
  CHECK(r.shape() == Shape{2, 3});
  check_close(r, {11, 22, 33, 14, 25, 36});
  // (2, 1) + (1, 3)
  r = array(std::vector<float>{1, 2}, Shape{2, 1}) -
      array(std::vector<float>{10, 20, 30}, Shape{1, 3});
  CHECK(r.shape() == Shape{2, 3});
  check_close(r, {-9, -19, -29, -8, -18, -28});
  // 0-d with (2, 2), both orders
  const Array two = scalar(2.0f);
  const Array sq = array(std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
  check_close(two * sq, {2, 4, 6, 8});
  check_close(sq / two, {0.5, 1, 1.5, 2});
  CHECK((two * two).shape() == Shape{});
  check_close(two * two, {4});
  // (1,) with (1,) and (1, 1, 1) with (3,)
  CHECK((f32s({3}) + f32s({4})).shape() == Shape{1});
  r = array(std::vector<float>{1}, Shape{1, 1, 1}) + row;
  CHECK(r.shape() == Shape{1, 1, 3});
  check_close(r, {11, 21, 31});
}

TEST_CASE("broadcasting with a zero-size dimension gives an empty result") {
  Array r = zeros({0, 3}) + f32s({1, 2, 3});
  CHECK(r.shape() == Shape{0, 3});
  CHECK(r.size() == 0);
  r = zeros({2, 0}, i32) * zeros({1, 0}, i32);
  CHECK(r.shape() == Shape{2, 0});
  r = zeros({0}) < 1.0f;
  CHECK(r.shape() == Shape{0});
  CHECK(r.dtype() == bool_);
  CHECK(abs(zeros({0, 4})).shape() == Shape{0, 4});
  CHECK(astype(zeros({0}), i32).shape() == Shape{0});
}

// Independent reference for the larger broadcasting cases: numpy's rule applied
// with explicit index arithmetic.
std::vector<double> broadcast_add_reference(const std::vector<double>& a,
                                            const Shape& as,
                                            const std::vector<double>& b,
                                            const Shape& bs, const Shape& out) {
  const auto index_in = [&](const Shape& s, const Shape& idx) {
    std::int64_t flat = 0;
    const std::size_t lead = out.size() - s.size();
    for (std::size_t d = 0; d < s.size(); ++d)
      flat = flat * s[d] + (s[d] == 1 ? 0 : idx[d + lead]);
    return static_cast<std::size_t>(flat);
  };
  std::vector<double> r;
  Shape idx(out.size(), 0);
  for (std::int64_t i = 0; i < numel(out); ++i) {
    std::int64_t rem = i;
    for (std::size_t d = out.size(); d-- > 0;) {
      idx[d] = rem % out[d];
      rem /= out[d];
    }
    r.push_back(a[index_in(as, idx)] + b[index_in(bs, idx)]);
  }
  return r;
}

TEST_CASE(
    "broadcasting matches numpy for long rows, short rows and many dims") {
  const std::vector<std::pair<Shape, Shape>> cases{
      {{3, 40}, {3, 1}},   {{3, 40}, {40}},        {{3, 1}, {3, 40}},
      {{5, 2}, {5, 1}},    {{2, 3, 20}, {3, 1}},   {{2, 1, 4, 1}, {3, 1, 17}},
      {{4, 1, 5}, {3, 1}}, {{1, 3, 1}, {2, 1, 4}}, {{2, 3, 4, 5}, {3, 1, 5}},
  };
  for (const auto& [as, bs] : cases) {
    CAPTURE(to_string(as));
    CAPTURE(to_string(bs));
    const Shape out = broadcast_shapes("test", as, bs);
    std::vector<double> av, bv;
    for (std::int64_t i = 0; i < numel(as); ++i)
      av.push_back(static_cast<double>(i));
    for (std::int64_t i = 0; i < numel(bs); ++i)
      bv.push_back(1000.0 * static_cast<double>(i + 1));
    const Array r = array(av, as) + array(bv, bs);
    CHECK(r.shape() == out);
    CHECK(r.to_vector<double>() ==
          broadcast_add_reference(av, as, bv, bs, out));
    // Integer ops take the same paths.
    std::vector<double> negated;
    for (double v : bv) negated.push_back(-v);
    const Array ri = astype(array(av, as), i32) - astype(array(bv, bs), i32);
    CHECK(astype(ri, f64).to_vector<double>() ==
          broadcast_add_reference(av, as, negated, bs, out));
  }
}

// ---- scalar operands ----

TEST_CASE("scalar operands take the array's dtype") {
  const Array x = i32s({1, 2, 3});
  CHECK((x + 2).dtype() == i32);
  CHECK(values<I32>(x + 2) == std::vector<I32>{3, 4, 5});
  CHECK(values<I32>(10 - x) == std::vector<I32>{9, 8, 7});
  CHECK(values<I32>(x * 2.0) == std::vector<I32>{2, 4, 6});  // 2.0 is integral
  CHECK(values<I32>(7 / x) == std::vector<I32>{7, 3, 2});
  CHECK(values<bool>(x > 1) == std::vector<bool>{false, true, true});
  CHECK(values<bool>(2 == x) == std::vector<bool>{false, true, false});
  CHECK(values<I32>(maximum(x, 2)) == std::vector<I32>{2, 2, 3});
  CHECK(values<I32>(minimum(x, 2)) == std::vector<I32>{1, 2, 2});
  const Array f = f32s({1, 2});
  CHECK((f * 0.5).dtype() == f32);
  check_close(f * 0.5, {0.5, 1});
  check_close(1 / f, {1, 0.5});
  check_close(power(f, 3), {1, 8});
  CHECK(values<U32>(u32s({5}) - 1u) == std::vector<U32>{4});
}

TEST_CASE(
    "a scalar that the array's dtype cannot hold is an error naming both") {
  const Array x = i32s({1, 2, 3});
  CHECK_THROWS_WITH_AS(
      x + 1.5,
      doctest::Contains("[add] scalar 1.5 cannot be represented in dtype i32"),
      DTypeError);
  CHECK_THROWS_WITH_AS(
      u32s({1}) * -1,
      doctest::Contains(
          "[multiply] scalar -1 cannot be represented in dtype u32"),
      DTypeError);
  CHECK_THROWS_WITH_AS(
      bools({true}) == 2,
      doctest::Contains("[equal] scalar 2 cannot be represented in dtype bool"),
      DTypeError);
}

// ---- errors ----

TEST_CASE("mixing dtypes is an error: kiln does not promote") {
  const Array a = zeros({2, 3}, f32);
  const Array b = zeros({3}, i32);
  CHECK_THROWS_WITH_AS(
      add(a, b),
      "[add] dtype mismatch: f32 and i32 (kiln does not promote; use astype) "
      "for operands of shapes (2, 3) and (3,)",
      DTypeError);
  CHECK_THROWS_WITH_AS(a < b,
                       doctest::Contains("[less] dtype mismatch: f32 and i32"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(
      maximum(b, a), doctest::Contains("[maximum] dtype mismatch: i32 and f32"),
      DTypeError);
}

TEST_CASE("floating-only ops reject integer and bool arrays") {
  const Array x = zeros({2, 3}, i32);
  CHECK_THROWS_WITH_AS(exp(x),
                       "[exp] requires a floating dtype, got i32 for an "
                       "operand of shape (2, 3); "
                       "convert with astype(x, f32)",
                       DTypeError);
  CHECK_THROWS_WITH_AS(
      log(x), doctest::Contains("[log] requires a floating dtype, got i32"),
      DTypeError);
  CHECK_THROWS_WITH_AS(tanh(x),
                       doctest::Contains("[tanh] requires a floating dtype"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(sqrt(x),
                       doctest::Contains("[sqrt] requires a floating dtype"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(rsqrt(x),
                       doctest::Contains("[rsqrt] requires a floating dtype"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(
      sigmoid(zeros({1}, bool_)),
      doctest::Contains("[sigmoid] requires a floating dtype, got bool"),
      DTypeError);
  CHECK_THROWS_WITH_AS(
      power(x, x),
      doctest::Contains(
          "[power] requires a floating dtype, got i32 for operands "
          "of shapes (2, 3) and (2, 3)"),
      DTypeError);
}

TEST_CASE(
    "arithmetic on bool is an error pointing at the logical ops and astype") {
  const Array b = bools({true, false});
  CHECK_THROWS_WITH_AS(
      b + b, doctest::Contains("[add] requires a numeric dtype, got bool"),
      DTypeError);
  CHECK_THROWS_WITH_AS(
      b * b, doctest::Contains("use logical_and/logical_or/logical_not"),
      DTypeError);
  CHECK_THROWS_WITH_AS(b - b, doctest::Contains("[subtract]"), DTypeError);
  CHECK_THROWS_WITH_AS(b / b, doctest::Contains("[divide]"), DTypeError);
  CHECK_THROWS_WITH_AS(
      -b, doctest::Contains("[neg] requires a numeric dtype, got bool"),
      DTypeError);
  CHECK_THROWS_WITH_AS(
      abs(b), doctest::Contains("[abs] requires a numeric dtype"), DTypeError);
  CHECK_THROWS_WITH_AS(relu(b),
                       doctest::Contains("[relu] requires a numeric dtype"),
                       DTypeError);
}

TEST_CASE("logical ops require bool") {
  const Array x = zeros({2}, f32);
  CHECK_THROWS_WITH_AS(logical_and(x, x),
                       "[logical_and] requires a bool dtype, got f32 for "
                       "operands of shapes (2,) "
                       "and (2,); compare first (e.g. x != 0)",
                       DTypeError);
  CHECK_THROWS_WITH_AS(
      x | x, doctest::Contains("[logical_or] requires a bool dtype, got f32"),
      DTypeError);
  CHECK_THROWS_WITH_AS(
      !zeros({2}, i32),
      doctest::Contains("[logical_not] requires a bool dtype, got i32"),
      DTypeError);
}

TEST_CASE("incompatible shapes are a ShapeError naming both") {
  CHECK_THROWS_WITH_AS(
      zeros({2, 3}) + zeros({4}),
      doctest::Contains("[add] shapes (2, 3) and (4,) cannot be broadcast"),
      ShapeError);
  CHECK_THROWS_WITH_AS(
      zeros({2}) == zeros({3}),
      doctest::Contains("[equal] shapes (2,) and (3,) cannot be broadcast"),
      ShapeError);
}

TEST_CASE("where checks its condition, branch dtypes and shapes") {
  const Array x = zeros({2});
  CHECK_THROWS_WITH_AS(
      where(x, x, x),
      doctest::Contains("[where] the condition must be bool, got f32"),
      DTypeError);
  CHECK_THROWS_WITH_AS(where(x > 0.0f, x, zeros({2}, i32)),
                       doctest::Contains("[where] dtype mismatch: f32 and i32"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(
      where(x > 0.0f, zeros({3}), x),
      "[where] shapes (2,), (3,) and (2,) cannot be broadcast together",
      ShapeError);
}

TEST_CASE(
    "None (a null Array) as an operand is a ValueError naming the op and "
    "argument") {
  const Array none;
  const Array x = zeros({2});
  CHECK_THROWS_WITH_AS(add(x, none), "[add] argument 2 is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
  CHECK_THROWS_WITH_AS(none * x, "[multiply] argument 1 is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
  CHECK_THROWS_WITH_AS(exp(none), "[exp] argument 1 is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
  CHECK_THROWS_WITH_AS(!none, "[logical_not] argument 1 is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
  CHECK_THROWS_WITH_AS(where(x > 0.0f, x, none),
                       "[where] argument 3 is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)", ValueError);
  CHECK_THROWS_WITH_AS(astype(none, i32),
                       "[astype] argument 1 is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
}

TEST_CASE("f16 rounds to nearest even once per operation, on every device") {
  const auto to16 = [](std::vector<float> v) {
    const auto n = static_cast<std::int64_t>(v.size());
    return astype(array<float>(v, {n}), f16);
  };
  const auto back = [](const Array& h) { return astype(h, f32).to_vector<float>(); };
  // Conversion: nearest, ties to even, subnormals, overflow, signs, NaN.
  const float sub = std::ldexp(1.0f, -24);  // the smallest subnormal half
  const std::vector<float> got = back(to16({0.1f, 65504.0f, 65520.0f, sub, sub / 2, 3 * sub / 2,
                                            -0.0f, -1e6f, 1.0f + std::ldexp(1.0f, -11)}));
  CHECK(got[0] == 0.0999755859375f);
  CHECK(got[1] == 65504.0f);
  CHECK(std::isinf(got[2]));  // rounds past the largest half
  CHECK(got[3] == sub);
  CHECK(got[4] == 0.0f);      // a tie: to the even 0
  CHECK(got[5] == 2 * sub);   // a tie: to the even 2
  CHECK(std::signbit(got[6]));
  CHECK(got[7] == -INFINITY);
  CHECK(got[8] == 1.0f);      // 1 + 2^-11 is a tie between 1 and 1 + 2^-10
  CHECK(std::isnan(back(to16({NAN}))[0]));
  // Arithmetic: each result rounded to f16 (not f32's 1.00048828125).
  CHECK(back(to16({1.0f}) + to16({std::ldexp(1.0f, -11)}))[0] == 1.0f);
  CHECK(back(to16({1.0f}) + to16({3 * std::ldexp(1.0f, -11)}))[0] == 1.001953125f);
  // A reduction accumulates in f32 and rounds once: 4096 ones sum to 4096
  // (a running f16 sum would stop at 2048).
  CHECK(back(sum(ones({4096}, f16)))[0] == 4096.0f);
  // Jitted (a fused group with f16 values) equals eager.
  const Array x = to16({0.5f, -1.25f, 3.0f, 100.0f});
  auto f = [](const Array& a) { return exp(a * 0.01) * a + 1.0; };
  CHECK(back(filter_jit(f)(x)) == back(f(x)));
  CHECK(f(x).dtype() == f16);
}

TEST_CASE("f16: the device's conversions equal half_to_float on all 65536 halves and float_to_half on 2^20 floats") {
  // On the CPU this is the F16C path where the CPU has it (its NaN lanes
  // redone by the portable functions): every half, NaN payloads included, and
  // floats at and around every half's ties, overflow and subnormals, plus
  // random words.
  std::vector<std::uint16_t> halves(1u << 16);
  for (std::uint32_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::uint16_t>(i);
  auto buf = HostBuffer::allocate(halves.size() * 2);
  std::memcpy(buf->host_data(), halves.data(), halves.size() * 2);
  const Array h = to_device(Array(DType::kF16, Shape{1 << 16}, std::move(buf)), default_device());
  const std::vector<float> wide = astype(h, f32).to_vector<float>();
  // A device may quiet a signalling NaN as it widens it (lavapipe does): NaN
  // of the same sign there; the CPU keeps every bit.
  const bool exact_nan = default_device() == Device::cpu();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < halves.size(); ++i) {
    const float want = half_to_float(halves[i]);
    if (!exact_nan && std::isnan(want) && std::isnan(wide[i]) &&
        std::signbit(want) == std::signbit(wide[i])) {
      continue;
    }
    if (std::bit_cast<std::uint32_t>(wide[i]) != std::bit_cast<std::uint32_t>(want)) {
      if (++wrong <= 5) MESSAGE("half ", halves[i], " widened to bits ", std::bit_cast<std::uint32_t>(wide[i]));
    }
  }
  CHECK(wrong == 0);
  std::vector<float> in;
  for (std::uint32_t se = 0; se < 512; ++se) {
    for (std::uint32_t m : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x3000u, 0x7fe000u, 0x7fffffu,
                            0x400000u, 0x12345u, 0x800u}) {
      in.push_back(std::bit_cast<float>(se << 23 | m));
    }
  }
  std::mt19937 g(11);
  while (in.size() < (1u << 20)) in.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(g())));
  const Array narrowed = astype(to_device(array<float>(in, {static_cast<std::int64_t>(in.size())}),
                                          default_device()),
                                f16);
  std::vector<std::uint16_t> got(in.size());
  narrowed.read_bytes(got.data());
  wrong = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (got[i] != float_to_half(in[i])) {
      if (++wrong <= 5) MESSAGE("f32 bits ", std::bit_cast<std::uint32_t>(in[i]), " gave ", got[i]);
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("a None operand combined with a C++ scalar names the op") {
  CHECK_THROWS_WITH_AS(Array() + 1.0f, "[add] array operand is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
  CHECK_THROWS_WITH_AS(2 * Array(), "[multiply] array operand is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
}

namespace {
// One KILN_MATH row against MathDef<P>::reference on its special values and NaN.
template <Prim P>
void check_math_against_reference(Array (*op)(const Array&)) {
  // On the CPU the kernels are xsimd's (~1 ulp); a Vulkan driver's may be looser.
  const double tol = default_device() == Device::cpu() ? 2e-6 : 2e-5;
  CAPTURE(name(P));
  std::vector<float> xs(std::begin(MathDef<P>::kSpecial), std::end(MathDef<P>::kSpecial));
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  const std::vector<float> got = op(f32s(xs)).to_vector<float>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(xs[i]);
    const double want = MathDef<P>::reference(static_cast<double>(xs[i]));
    if (std::isnan(want)) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want)) {
      CHECK(static_cast<double>(got[i]) == want);
    } else {
      CHECK(std::abs(static_cast<double>(got[i]) - want) <= tol * std::max(1.0, std::abs(want)));
      if (want == 0.0) CHECK(std::signbit(got[i]) == std::signbit(want));
    }
  }
  // Integer operands are refused, naming the op.
  const std::string tag = "[" + std::string(name(P)) + "]";
  CHECK_THROWS_WITH_AS(op(i32s({1, 2})), doctest::Contains(tag.c_str()), DTypeError);
}
}  // namespace

namespace {
// One KILN_MATH2 row against MathDef<P>::reference on its special pairs and NaNs.
template <Prim P>
void check_math2_against_reference(Array (*op)(const Array&, const Array&)) {
  const double tol = default_device() == Device::cpu() ? 2e-6 : 2e-5;
  CAPTURE(name(P));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> as, bs;
  for (const auto& pair : MathDef<P>::kSpecial) {
    as.push_back(pair[0]);
    bs.push_back(pair[1]);
  }
  as.insert(as.end(), {nan, 1.0f, nan});
  bs.insert(bs.end(), {1.0f, nan, nan});
  const std::vector<float> got = op(f32s(as), f32s(bs)).to_vector<float>();
  for (std::size_t i = 0; i < as.size(); ++i) {
    CAPTURE(as[i]);
    CAPTURE(bs[i]);
    const double want = MathDef<P>::reference(static_cast<double>(as[i]), static_cast<double>(bs[i]));
    if (std::isnan(want)) {
      CHECK(std::isnan(got[i]));
    } else {
      CHECK(std::abs(static_cast<double>(got[i]) - want) <= tol * std::max(1.0, std::abs(want)));
      CHECK(std::signbit(got[i]) == std::signbit(want));
    }
  }
  const std::string tag = "[" + std::string(name(P)) + "]";
  CHECK_THROWS_WITH_AS(op(i32s({1, 2}), i32s({1, 2})), doctest::Contains(tag.c_str()), DTypeError);
}
}  // namespace

TEST_CASE("exp, expm1 and exp2 are finite up to f32's overflow edge, eagerly and compiled") {
  // xsimd 8 overflows from exp(88.3763) and exp2(127) (dsl/unary_math.hpp
  // exp_full); f32's results are finite up to 88.7228 and 128. (Not kSpecial:
  // the f16 harness samples those too.)
  const double tol = default_device() == Device::cpu() ? 4e-7 : 2e-5;  // ~3 ulp on the CPU
  const auto check = [&](Array (*op)(const Array&), double (*want_of)(double), std::vector<float> xs) {
    const Array x = f32s(xs);
    const auto jitted = filter_jit([op](const Array& a) { return op(a) * 1.0f; });
    for (const auto& got : {op(x).to_vector<float>(), jitted(x).to_vector<float>()}) {
      for (std::size_t i = 0; i < xs.size(); ++i) {
        CAPTURE(xs[i]);
        const float want = static_cast<float>(want_of(xs[i]));  // inf past f32's range
        if (std::isinf(want)) {
          CHECK(got[i] == want);
        } else {
          CHECK(std::abs(got[i] - static_cast<double>(want)) <= tol * std::abs(want));
        }
      }
    }
  };
  check(exp, [](double v) { return std::exp(v); },
        {88.0f, 88.38f, 88.5f, 88.72f, 88.7228f, 88.7229f, 89.0f, -104.0f});
  check(expm1, [](double v) { return std::expm1(v); }, {40.0f, 60.0f, 88.5f, 88.7228f, 88.7229f});
  check(exp2, [](double v) { return std::exp2(v); }, {126.0f, 126.5f, 127.0f, 127.9f, 128.0f});
}

TEST_CASE("float math ops (every KILN_MATH row) match the C library, with their special values") {
  std::size_t checked = 0;
#define KILN_PRIM(id, name, family, params, traits)
#define KILN_MATH(id, name, traits) \
  check_math_against_reference<Prim::id>(&kiln::name);  \
  ++checked;
#define KILN_MATH2(id, name, traits) \
  check_math2_against_reference<Prim::id>(&kiln::name);  \
  ++checked;
#include "kiln/dsl/primitives.inc"
#undef KILN_MATH2
#undef KILN_MATH
#undef KILN_PRIM
  std::size_t rows = 0;
  for (const PrimInfo& i : all_prims()) rows += has_trait(i.prim, PrimTrait::kMath) ? 1 : 0;
  CHECK(checked == rows);
}

TEST_CASE("composites: reciprocal, clip, isnan/isinf/isfinite, logaddexp") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  check_close(reciprocal(f32s({2.0f, -0.5f, 0.0f, -0.0f})), {0.5, -2.0, kInf, -kInf});
  check_close(clip(f32s({-3.0f, 0.5f, 7.0f, nan}), -1.0, 2.0), {-1.0, 0.5, 2.0, kNaN});
  CHECK(values<I32>(clip(i32s({-9, 3, 40}), 0, 10)) == std::vector<I32>{0, 3, 10});
  check_close(clip(f32s({-3.0f, 0.5f, 7.0f}), f32s({0.0f, 1.0f, 2.0f}), f32s({1.0f})),
              {0.0, 1.0, 1.0});
  CHECK_THROWS_WITH_AS(clip(f32s({1.0f}), 2.0, 1.0),
                       "[clip] lower bound 2 is above the upper bound 1", ValueError);
  const Array special = f32s({1.0f, nan, inf, -inf, 0.0f});
  CHECK(values<bool>(isnan(special)) == std::vector<bool>{false, true, false, false, false});
  CHECK(values<bool>(isinf(special)) == std::vector<bool>{false, false, true, true, false});
  CHECK(values<bool>(isfinite(special)) == std::vector<bool>{true, false, false, false, true});
  CHECK_THROWS_WITH_AS(isnan(i32s({1})), "[isnan] requires a floating dtype, got i32", DTypeError);
  // logaddexp against log(exp(a) + exp(b)) in double, where that does not overflow.
  const std::vector<float> a = {0.0f, 1.0f, -3.0f, 100.0f, -inf, inf, -inf, nan};
  const std::vector<float> b = {0.0f, -2.0f, -3.5f, 99.0f, 2.0f, inf, -inf, 1.0f};
  std::vector<double> want;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    if (std::isnan(x) || std::isnan(y)) {
      want.push_back(kNaN);
    } else if (x == y && std::isinf(x)) {
      want.push_back(x);
    } else {
      const double m = std::max(x, y);
      want.push_back(m + std::log1p(std::exp(-std::abs(x - y))));
    }
  }
  check_close(logaddexp(f32s(a), f32s(b)), want);
}
