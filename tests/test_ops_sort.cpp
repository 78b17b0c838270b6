// Sorting: argsort (stable, NaN largest, -0.0 == 0.0, both directions), sort
// and top_k with their gradients, and their errors. Expected values are
// numpy's (np.argsort(kind="stable"), np.sort) and lax.top_k's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <kiln/kiln.hpp>
#include <limits>
#include <vector>

using namespace kiln;

namespace {
using I = std::int32_t;
const float kNan = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();
}  // namespace

TEST_CASE("argsort is stable, puts NaN last and treats -0.0 as 0.0") {
  Array a = array<float>({3, kNan, -0.0f, 0.0f, -kInf, 1, kNan, 1, -0.0f});
  // np.argsort(a, kind="stable")
  CHECK(argsort(a).to_vector<I>() == std::vector<I>{4, 2, 3, 8, 5, 7, 0, 1, 6});
  // Descending: NaN first, ties still in index order (lax.top_k's rule).
  CHECK(argsort(a, 0, true).to_vector<I>() == std::vector<I>{1, 6, 0, 5, 7, 2, 3, 8, 4});
}

TEST_CASE("argsort and sort work along any axis") {
  Array m = array<I>({3, 1, 2, 9, 7, 8}, {2, 3});
  CHECK(argsort(m).to_vector<I>() == std::vector<I>{1, 2, 0, 1, 2, 0});
  CHECK(argsort(m, 0).to_vector<I>() == std::vector<I>{0, 0, 0, 1, 1, 1});
  CHECK(sort(m).to_vector<I>() == std::vector<I>{1, 2, 3, 7, 8, 9});
  CHECK(sort(m, 1, true).to_vector<I>() == std::vector<I>{3, 2, 1, 9, 8, 7});
  // Lengths that are not powers of two, many ties.
  std::vector<I> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<I>((i * 7919) % 13);
  const std::vector<I> got = argsort(array<I>(v, {1000})).to_vector<I>();
  std::vector<I> want(1000);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<I>(i);
  std::stable_sort(want.begin(), want.end(), [&](I x, I y) { return v[x] < v[y]; });
  CHECK(got == want);
  CHECK(argsort(zeros({2, 0})).shape() == Shape{2, 0});
}

TEST_CASE("top_k gives the k largest values, largest first, and their indices") {
  Array a = array<float>({1, 5, 3, 5, -1, 4, 2, 0}, {2, 4});
  auto [values, indices] = top_k(a, 2);
  CHECK(values.shape() == Shape{2, 2});
  CHECK(values.to_vector<float>() == std::vector<float>{5, 5, 4, 2});
  CHECK(indices.to_vector<I>() == std::vector<I>{1, 3, 1, 2});
  CHECK(top_k(a, 0).first.shape() == Shape{2, 0});
  CHECK_THROWS_WITH_AS(top_k(a, 5), doctest::Contains("[top_k] k = 5 is not in [0, 4]"), ValueError);
  CHECK_THROWS_WITH_AS(argsort(scalar<float>(1)), doctest::Contains("[argsort] needs an array of rank >= 1"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(argsort(a, 2), doctest::Contains("[argsort]"), Error);
}

TEST_CASE("the gradients of sort and top_k go back to where each value came from") {
  Array x = array<float>({0.5f, -2, 3, 1});
  auto weighted_sort = [](const Array& v) { return sum(sort(v) * array<float>({1, 10, 100, 1000})); };
  // sorted: [-2, 0.5, 1, 3] from indices [1, 0, 3, 2]
  CHECK(grad(weighted_sort)(x).to_vector<float>() == std::vector<float>{10, 1, 1000, 100});
  auto top2 = [](const Array& v) { return sum(top_k(v, 2).first * array<float>({1, 10})); };
  CHECK(grad(top2)(x).to_vector<float>() == std::vector<float>{0, 0, 1, 10});
}
