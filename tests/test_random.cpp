// kiln::random against jax.random golden values (tests/golden/random.txt, written
// by tests/golden/make_random_golden.py): keys and raw bits exactly, floats to
// ~1 ulp; plus determinism, key independence, distribution sanity, and tracing.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <kiln/dsl/program.hpp>
#include <kiln/dsl/trace.hpp>
#include <kiln/kiln.hpp>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "golden_file.hpp"

using namespace kiln;

namespace {

using Golden = testing::GoldenRecord;

// One record ("value") per case.
std::map<std::string, Golden> load_golden() {
  std::map<std::string, Golden> out;
  for (const auto& [case_name, records] : testing::load_golden_file("random.txt")) {
    out[case_name] = records.at("value");
  }
  return out;
}

const Golden& golden(const std::string& name) {
  static const auto g = load_golden();
  auto it = g.find(name);
  REQUIRE_MESSAGE(it != g.end(), "no golden case " << name);
  return it->second;
}

template <class T>
void check_exact(const Array& got, const std::string& name) {
  INFO(name);
  const Golden& want = golden(name);
  REQUIRE(got.shape() == want.shape);
  const std::vector<T> v = got.to_vector<T>();
  REQUIRE(v.size() == want.values.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    CAPTURE(i);
    CHECK(static_cast<double>(v[i]) == want.values[i]);
  }
}

void check_f32(const Array& got, const std::string& name, double rel,
               double abs_tol) {
  INFO(name);
  const Golden& want = golden(name);
  REQUIRE(got.dtype() == f32);
  REQUIRE(got.shape() == want.shape);
  const std::vector<float> v = got.to_vector<float>();
  for (std::size_t i = 0; i < v.size(); ++i) {
    CAPTURE(i);
    CAPTURE(v[i]);
    CAPTURE(want.values[i]);
    CHECK(std::abs(v[i] - want.values[i]) <=
          abs_tol + rel * std::abs(want.values[i]));
  }
}

using U32 = std::uint32_t;

}  // namespace

TEST_CASE("random keys, split and fold_in match jax.random bit for bit") {
  check_exact<U32>(random::key(0), "key_0");
  check_exact<U32>(random::key(42), "key_42");
  check_exact<U32>(random::split(random::key(42)), "split_42");
  check_exact<U32>(random::split(random::key(42), 3), "split_42_3");
  check_exact<U32>(random::fold_in(random::key(42), 7), "fold_in_42_7");
}

TEST_CASE("random::bits matches jax.random.bits bit for bit") {
  check_exact<U32>(random::bits(random::key(42), {5}), "bits_42_5");
  check_exact<U32>(random::bits(random::key(1), {2, 3}), "bits_1_2x3");
  check_exact<U32>(random::bits(random::key(42), {3}), "bits_42_3");
  CHECK(random::bits(random::key(1), {0, 4}).shape() == Shape{0, 4});
  CHECK(random::bits(random::key(1), {}).shape() == Shape{});
}

TEST_CASE("uniform, normal and bernoulli match jax.random") {
  // uniform is exact bit manipulation then one multiply-add, which XLA's CPU
  // backend may fuse into an fma: exact on [0, 1), within 1 ulp on other ranges.
  check_f32(random::uniform(random::key(0), {7}), "uniform_0_7", 1e-6, 0);
  check_exact<float>(random::uniform(random::key(0), {7}), "uniform_0_7");
  check_f32(random::uniform(random::key(5), {6}, f32, -2.0, 3.0),
            "uniform_5_range", 1e-6, 1e-6);
  check_f32(random::normal(random::key(0), {7}), "normal_0_7", 1e-6, 1e-6);
  check_f32(random::normal(random::key(9), {64}), "normal_9_64", 1e-6, 1e-6);
  check_exact<bool>(random::bernoulli(random::key(3), 0.3, {10}), "bernoulli_3");
}

TEST_CASE("randint and permutation match jax.random bit for bit") {
  check_exact<std::int32_t>(random::randint(random::key(4), {12}, 0, 10),
                            "randint_4_0_10");
  check_exact<std::int32_t>(random::randint(random::key(4), {8}, -5, 1000),
                            "randint_4_m5_1000");
  check_exact<std::int32_t>(random::permutation(random::key(6), 10),
                            "permutation_6_10");
}

TEST_CASE("subkey, gumbel, truncated_normal and categorical match jax.random") {
  const Array keys = random::split(random::key(42), 4);
  check_exact<U32>(random::subkey(keys, 2), "subkey_42_4_2");
  check_exact<U32>(random::subkey(keys, -2), "subkey_42_4_2");
  check_f32(random::gumbel(random::key(3), {6}), "gumbel_3_6", 1e-5, 1e-6);
  check_f32(random::truncated_normal(random::key(9), -2.0, 1.0, {8}), "truncated_normal_9_m2_1",
            1e-5, 1e-6);
  check_f32(random::truncated_normal(random::key(10), 0.0, std::numeric_limits<double>::infinity(), {6}),
            "truncated_normal_10_0_inf", 1e-5, 1e-6);
  CHECK_THROWS_WITH_AS(random::truncated_normal(random::key(1), 1.0, 1.0, {2}),
                       doctest::Contains("[random.truncated_normal] needs lower < upper"), ValueError);
  const float inf = std::numeric_limits<float>::infinity();
  const Array logits = array<float>({0.1f, -1.0f, 2.0f, 0.5f, -0.3f,  //
                                     1.0f, 1.0f, 1.0f, 1.0f, 1.0f,    //
                                     -inf, 0.0f, -inf, 3.0f, 0.2f},
                                    {3, 5});
  check_exact<std::int32_t>(random::categorical(random::key(7), logits), "categorical_7_last");
  check_exact<std::int32_t>(random::categorical(random::key(7), logits, 0), "categorical_7_first");
  check_exact<std::int32_t>(random::categorical(random::key(8), zeros({64, 3})), "categorical_8_many");
  // Errors name the function and what was wrong.
  CHECK_THROWS_WITH_AS(random::subkey(keys, 4), "[random.subkey] index 4 is out of range for 4 keys",
                       IndexError);
  CHECK_THROWS_WITH_AS(random::subkey(random::key(1), 0), doctest::Contains("shape (n, 2)"), DTypeError);
  CHECK_THROWS_WITH_AS(random::categorical(random::key(1), logits, 2),
                       doctest::Contains("[random.categorical] axis 2 is out of range"), ValueError);
}

TEST_CASE("categorical draws each category about as often as its probability") {
  // p = softmax(log [1, 2, 5]) = [0.125, 0.25, 0.625]; 4000 draws in one call.
  const Array logits = broadcast_to(log(array<float>({1.0f, 2.0f, 5.0f})), {4000, 3});
  const std::vector<std::int32_t> draws = random::categorical(random::key(11), logits).to_vector<std::int32_t>();
  std::array<int, 3> counts{};
  for (std::int32_t d : draws) counts.at(static_cast<std::size_t>(d))++;
  // Within 5 standard deviations of the binomial mean.
  const double p[] = {0.125, 0.25, 0.625};
  for (std::size_t k = 0; k < 3; ++k) {
    CAPTURE(k);
    const double mean = 4000 * p[k], sd = std::sqrt(4000 * p[k] * (1 - p[k]));
    CHECK(std::abs(counts[k] - mean) < 5 * sd);
  }
}

TEST_CASE("the same key gives the same numbers; other and split keys differ") {
  Array k = random::key(7);
  CHECK(random::bits(k, {16}).to_vector<U32>() ==
        random::bits(random::key(7), {16}).to_vector<U32>());
  CHECK(random::uniform(k, {16}).to_vector<float>() ==
        random::uniform(k, {16}).to_vector<float>());
  CHECK(random::bits(k, {16}).to_vector<U32>() !=
        random::bits(random::key(8), {16}).to_vector<U32>());
  Array ks = random::split(k, 3);
  std::vector<std::vector<U32>> draws;
  for (std::int64_t i = 0; i < 3; ++i) {
    Array sub = reshape(slice_axis(ks, 0, i, i + 1), {2});
    draws.push_back(random::bits(sub, {8}).to_vector<U32>());
  }
  draws.push_back(random::bits(k, {8}).to_vector<U32>());
  draws.push_back(random::bits(random::fold_in(k, 1000), {8}).to_vector<U32>());
  for (std::size_t i = 0; i < draws.size(); ++i) {
    for (std::size_t j = i + 1; j < draws.size(); ++j) {
      CAPTURE(i);
      CAPTURE(j);
      CHECK(draws[i] != draws[j]);
    }
  }
  // As in JAX (jax_threefry_partitionable), split(k, n)[i] is fold_in(k, i).
  CHECK(reshape(slice_axis(ks, 0, 1, 2), {2}).to_vector<U32>() ==
        random::fold_in(k, 1).to_vector<U32>());
}

TEST_CASE("samples have the right range and moments") {
  const std::int64_t n = 20000;
  std::vector<float> u = random::uniform(random::key(11), {n}, f32, -1.0, 3.0)
                             .to_vector<float>();
  CHECK(*std::min_element(u.begin(), u.end()) >= -1.0f);
  CHECK(*std::max_element(u.begin(), u.end()) < 3.0f);
  const double mean_u = std::accumulate(u.begin(), u.end(), 0.0) / n;
  CHECK(mean_u == doctest::Approx(1.0).epsilon(0.03));

  std::vector<float> z = random::normal(random::key(12), {n}).to_vector<float>();
  double m = 0, m2 = 0;
  for (float x : z) {
    CHECK(std::isfinite(x));
    m += x;
    m2 += double(x) * x;
  }
  m /= n;
  CHECK(std::abs(m) < 0.05);
  CHECK(m2 / n - m * m == doctest::Approx(1.0).epsilon(0.05));

  std::vector<std::int32_t> r =
      random::randint(random::key(13), {n}, -3, 4).to_vector<std::int32_t>();
  std::vector<int> counts(7);
  for (auto x : r) {
    REQUIRE(x >= -3);
    REQUIRE(x < 4);
    ++counts[x + 3];
  }
  for (int c : counts) CHECK(std::abs(c - n / 7.0) < 0.1 * n / 7.0);
  CHECK(random::randint(random::key(13), {4}, 5, 5).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{5, 5, 5, 5});

  std::vector<bool> b = random::bernoulli(random::key(14), 0.25, {n}).to_vector<bool>();
  CHECK(std::count(b.begin(), b.end(), true) / double(n) ==
        doctest::Approx(0.25).epsilon(0.08));
}

TEST_CASE("erfinv inverts erf and is infinite at +-1") {
  std::vector<float> xs{-0.999f, -0.5f, -1e-4f, 0.0f, 0.3f, 0.9f, 0.99999f};
  std::vector<float> y = random::erfinv(array<float>(xs, {7})).to_vector<float>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(xs[i]);
    CHECK(std::erf(double(y[i])) == doctest::Approx(xs[i]).epsilon(1e-5));
  }
  std::vector<float> e = random::erfinv(array<float>({-1.0f, 1.0f})).to_vector<float>();
  CHECK(std::isinf(e[0]));
  CHECK(e[0] < 0);
  CHECK(std::isinf(e[1]));
  CHECK(e[1] > 0);
}

TEST_CASE("permutation is a permutation, changes with the key, is traceable") {
  for (std::int64_t n : {0, 1, 2, 37}) {
    std::vector<std::int32_t> p = random::permutation(random::key(3), n)
                                      .to_vector<std::int32_t>();
    std::sort(p.begin(), p.end());
    std::vector<std::int32_t> want(static_cast<std::size_t>(n));
    std::iota(want.begin(), want.end(), 0);
    CHECK(p == want);
  }
  CHECK(random::permutation(random::key(3), 37).to_vector<std::int32_t>() !=
        random::permutation(random::key(4), 37).to_vector<std::int32_t>());
}

TEST_CASE("samplers trace into a program that evaluates like the eager calls") {
  Trace t;
  Array k = t.input({u32, {2}}, default_device(), "key");
  Array outs[] = {random::uniform(k, {7}), random::normal(random::fold_in(k, 3), {5}),
                  random::permutation(k, 9)};
  Program p = t.finish(std::span<const Array>(outs, 3));
  optimize(p);
  Array key = random::key(0);
  std::vector<Array> got = eval(p, std::vector<Array>{key});
  REQUIRE(got.size() == 3);
  CHECK(got[0].to_vector<float>() == random::uniform(key, {7}).to_vector<float>());
  CHECK(got[1].to_vector<float>() ==
        random::normal(random::fold_in(key, 3), {5}).to_vector<float>());
  CHECK(got[2].to_vector<std::int32_t>() ==
        random::permutation(key, 9).to_vector<std::int32_t>());
  check_f32(got[0], "uniform_0_7", 1e-6, 0);
}

TEST_CASE("random functions check their key") {
  CHECK_THROWS_WITH_AS(
      random::bits(array<float>({0.0f, 1.0f}), {3}),
      "[random.bits] a key is a u32 array of shape (2,), got f32 of shape (2,); "
      "make one with random::key(seed) or take a row of random::split",
      DTypeError);
  CHECK_THROWS_AS(random::split(random::split(random::key(0))), DTypeError);
  CHECK_THROWS_AS(random::uniform(Array(), {2}), ValueError);
  CHECK_THROWS_WITH_AS(random::uniform(random::key(0), {2}, i32),
                       "[random.uniform] supports f32 only, got i32", DTypeError);
}
