// erf and erfinv (dsl/unary_math.hpp): values against std::erf and against
// erfinv golden values computed with mpmath at 50 digits, the special values,
// gradients in closed form, and erfinv's f32 bits against the composite that
// random::normal was written in before (jax.lax.erf_inv's algorithm).
// Arrays are created on the default device, so this runs on every backend.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <kiln/kiln.hpp>
#include <limits>
#include <numbers>
#include <vector>

using namespace kiln;

namespace {

bool on_cpu() { return default_device() == Device::cpu(); }

// |got - want| <= rel * |want| (NaN matches NaN, infinities match exactly).
void check_rel(double got, double want, double rel) {
  if (std::isnan(want)) {
    CHECK(std::isnan(got));
  } else if (std::isinf(want) || want == 0.0) {
    CHECK(got == want);
    CHECK(std::signbit(got) == std::signbit(want));
  } else {
    CHECK(std::abs(got - want) <= rel * std::abs(want));
  }
}

std::vector<double> as_doubles(const Array& a) {
  if (a.dtype() == f64) return a.to_vector<double>();
  std::vector<double> out;
  for (float v : a.to_vector<float>()) out.push_back(v);
  return out;
}

// erfinv(x) to 20 digits (mpmath, mp.dps = 50).
struct Golden {
  double x, erfinv;
};
const Golden kGolden64[] = {
    {1e-300, 8.8622692545275803586e-301},
    {1e-10, 8.8622692545275804594e-11},
    {0.1, 0.088855990494257691974},
    {0.3, 0.27246271472675434502},
    {0.5, 0.47693627620446987338},
    {-0.5, -0.47693627620446987338},
    {0.7, 0.73286907795921678488},
    {0.9, 1.1630871536766741628},
    {0.99, 1.8213863677184494559},
    {0.999, 2.3267537655135244939},
    {0.999999, 3.4589107372754987775},
    {0.999999999999, 5.0420318985726961301},
    {0.9999999999999998, 5.8050186831934533002},
    {-0.9999999999999999, -5.8635847487551679272},
};
// f32 inputs (the float nearest each of 1e-30, 0.001, 0.1, ... 1 - 2^-24).
const Golden kGolden32[] = {
    {1.0000000031710769e-30, 8.8622692826305170166e-31},
    {0.0010000000474974513, 0.00088622719956010540199},
    {0.10000000149011612, 0.088855991825306481719},
    {0.30000001192092896, 0.27246272610552377481},
    {0.5, 0.47693627620446987338},
    {0.699999988079071, 0.73286905988275890776},
    {0.8999999761581421, 1.1630870719457722355},
    {0.9900000095367432, 1.821386600900277775},
    {0.9990000128746033, 2.3267563267961547502},
    {0.9998999834060669, 2.7510354379032874006},
    {0.9999899864196777, 3.1232057711650707555},
    {0.9999989867210388, 3.4570747260359500124},
    {0.9999999403953552, 3.8325068569007109095},
    {-0.75, -0.81341984759761854169},
};

// The composite random::normal used before erfinv was a primitive: XLA's
// ErfInv32 written in DSL ops, one op per step.
Array erfinv_composite(const Array& x) {
  static constexpr float kSmall[9] = {2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f,
                                      -4.39150654e-06f, 0.00021858087f,  -0.00125372503f,
                                      -0.00417768164f,  0.246640727f,    1.50140941f};
  static constexpr float kLarge[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f,
                                      -0.00367342844f,  0.00573950773f,  -0.0076224613f,
                                      0.00943887047f,   1.00167406f,     2.83297682f};
  Array w = -log1p(-(x * x));
  Array small = w < 5.0;
  const auto coefficient = [&](int i) {
    return where(small, full(Shape{}, kSmall[i], f32), full(Shape{}, kLarge[i], f32));
  };
  w = where(small, w - 2.5, sqrt(w) - 3.0);
  Array p = coefficient(0);
  for (int i = 1; i < 9; ++i) p = coefficient(i) + p * w;
  return where(abs(x) == 1.0, x * std::numeric_limits<double>::infinity(), p * x);
}

// The bits of each element; every NaN as one (a driver may flip a NaN's sign
// where one kernel negates it and another does not).
std::vector<std::uint32_t> bits_of(const Array& a) {
  std::vector<std::uint32_t> out;
  for (float v : a.to_vector<float>()) {
    std::uint32_t u = 0x7fc00000u;
    if (!std::isnan(v)) std::memcpy(&u, &v, 4);
    out.push_back(u);
  }
  return out;
}

}  // namespace

TEST_CASE("erf matches std::erf in f32 (and f64 on the CPU), with its special values") {
  const double nan = std::numeric_limits<double>::quiet_NaN(),
               inf = std::numeric_limits<double>::infinity();
  std::vector<double> xs = {0.0, -0.0, 1e-30, 1e-3, 0.1, -0.5, 0.9,  1.0, -1.5,
                            2.0, 3.0,  -3.9,  4.0,  6.0, inf,  -inf, nan};
  for (int i = -40; i <= 40; ++i) xs.push_back(i / 10.0 + 0.013);
  std::vector<float> xf(xs.begin(), xs.end());
  const std::vector<double> got =
      as_doubles(erf(array<float>(xf, {static_cast<std::int64_t>(xf.size())})));
  for (std::size_t i = 0; i < xf.size(); ++i) {
    CAPTURE(xf[i]);
    // Within 2e-6 relative of erf at the f32 input on both devices (xsimd's
    // erf on the CPU; XLA's rational approximation on Vulkan).
    check_rel(got[i], std::erf(static_cast<double>(xf[i])), 2e-6);
  }
  const Array x64 = array<double>(xs, {static_cast<std::int64_t>(xs.size())});
  if (on_cpu()) {
    const std::vector<double> g64 = erf(x64).to_vector<double>();
    for (std::size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(xs[i]);
      check_rel(g64[i], std::erf(xs[i]), 1e-14);  // xsimd's f64 erf: up to ~7e-15
    }
  } else {
    CHECK_THROWS_WITH_AS(erf(x64), doctest::Contains("[erf] f64 is not supported on vulkan"),
                         DTypeError);
  }
  CHECK_THROWS_WITH_AS(erf(array<std::int32_t>({1})), doctest::Contains("[erf]"), DTypeError);
}

TEST_CASE(
    "erfinv matches mpmath's erfinv: f64 to 1e-15 on the CPU, f32 to its Giles approximation") {
  if (on_cpu()) {
    std::vector<double> xs;
    for (const Golden& g : kGolden64) xs.push_back(g.x);
    const std::vector<double> got =
        erfinv(array<double>(xs, {static_cast<std::int64_t>(xs.size())})).to_vector<double>();
    for (std::size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(xs[i]);
      check_rel(got[i], kGolden64[i].erfinv, 1e-15);
    }
    // And erfinv inverts erf over (-1, 1), to a few ulp of the input.
    std::vector<double> ys;
    for (int i = -999; i <= 999; i += 7) ys.push_back(i / 1000.0);
    const std::vector<double> inv =
        erfinv(array<double>(ys, {static_cast<std::int64_t>(ys.size())})).to_vector<double>();
    for (std::size_t i = 0; i < ys.size(); ++i) {
      CAPTURE(ys[i]);
      CHECK(std::abs(std::erf(inv[i]) - ys[i]) <= 4e-16);
    }
  }
  std::vector<float> xf;
  for (const Golden& g : kGolden32) xf.push_back(static_cast<float>(g.x));
  const std::vector<float> got =
      erfinv(array<float>(xf, {static_cast<std::int64_t>(xf.size())})).to_vector<float>();
  for (std::size_t i = 0; i < xf.size(); ++i) {
    CAPTURE(xf[i]);
    // Giles' f32 polynomial in w = -log1p(-x^2) (jax.lax.erf_inv's): ~1e-7
    // relative below |x| = 0.99; nearer +-1, where x^2 rounds away low bits of
    // 1 - x^2, up to 3.1e-6 (at 0.9999).
    check_rel(got[i], kGolden32[i].erfinv, std::abs(xf[i]) < 0.99f ? 2e-7 : 5e-6);
  }
}

TEST_CASE("erfinv is +-inf at +-1 and NaN past them and for NaN, in f32 and f64") {
  const double nan = std::numeric_limits<double>::quiet_NaN(),
               inf = std::numeric_limits<double>::infinity();
  const std::vector<double> xs = {1.0, -1.0, 1.0000001, -1.5, 2.0, inf, -inf, nan, 0.0, -0.0};
  const std::vector<double> want = {inf, -inf, nan, nan, nan, nan, nan, nan, 0.0, -0.0};
  const std::vector<float> xf(xs.begin(), xs.end());
  const std::vector<double> got = as_doubles(erfinv(array<float>(xf, {10})));
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(xs[i]);
    check_rel(got[i], want[i], 0.0);
  }
  if (on_cpu()) {
    const std::vector<double> g64 = erfinv(array<double>(xs, {10})).to_vector<double>();
    for (std::size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(xs[i]);
      check_rel(g64[i], want[i], 0.0);
    }
  } else {
    CHECK_THROWS_WITH_AS(erfinv(array<double>(xs, {10})),
                         doctest::Contains("[erfinv] f64 is not supported on vulkan"), DTypeError);
  }
}

TEST_CASE(
    "the gradients of erf and erfinv are 2/sqrt(pi) exp(-x^2) and sqrt(pi)/2 exp(erfinv(x)^2)") {
  const std::vector<float> xs = {-2.0f, -0.5f, 0.0f, 0.3f, 1.7f};
  const std::vector<float> ge =
      grad([](const Array& x) { return sum(erf(x)); })(array<float>(xs, {5})).to_vector<float>();
  const std::vector<float> us = {-0.99f, -0.5f, 0.0f, 0.3f, 0.9f};
  const std::vector<float> gi =
      grad([](const Array& x) { return sum(erfinv(x)); })(array<float>(us, {5})).to_vector<float>();
  const std::vector<float> ys = erfinv(array<float>(us, {5})).to_vector<float>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    CHECK(ge[i] ==
          doctest::Approx(2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x)).epsilon(1e-5));
    // erfinv's slope is the reciprocal of erf's at erfinv(u).
    const double y = ys[i];
    CHECK(gi[i] ==
          doctest::Approx(std::sqrt(std::numbers::pi) / 2 * std::exp(y * y)).epsilon(1e-5));
  }
}

TEST_CASE("erfinv in f32 gives the composite's bits (jax.lax.erf_inv's steps), eagerly and fused") {
  std::vector<float> xs;
  for (int i = -2000; i <= 2000; ++i) xs.push_back(static_cast<float>(i) / 2000.5f);
  for (float t : {1e-3f, 1e-5f, 1e-7f, 5.9604645e-08f}) {
    xs.push_back(1.0f - t);
    xs.push_back(t - 1.0f);
  }
  xs.insert(xs.end(), {1.0f, -1.0f, 1.5f, std::numeric_limits<float>::quiet_NaN()});
  const Array x = array<float>(xs, {static_cast<std::int64_t>(xs.size())});
  const auto want = bits_of(erfinv_composite(x));
  CHECK(bits_of(erfinv(x)) == want);
  CHECK(bits_of(random::erfinv(x)) == want);
  CHECK(bits_of(filter_jit([](const Array& a) { return erfinv(a); })(x)) == want);
  CHECK(bits_of(filter_jit([](const Array& a) { return erfinv_composite(a); })(x)) == want);
}
