// Indexing ops: take, take_along_axis, one_hot (numpy / jax.nn semantics) and
// their errors. Expected values are worked out by hand.
#include <doctest/doctest.h>

#include <cstdint>
#include <kiln/kiln.hpp>
#include <vector>

using namespace kiln;

namespace {
using I = std::int32_t;
using U = std::uint32_t;
}  // namespace

TEST_CASE(
    "take along axis 0 picks rows, negative indices counting from the end") {
  Array a = array<I>({0, 1, 2, 3, 4, 5}, {3, 2});
  Array t = take(a, array<I>({-1, 0, 1, -1}), 0);
  CHECK(t.shape() == Shape{4, 2});
  CHECK(t.to_vector<I>() == std::vector<I>{4, 5, 0, 1, 2, 3, 4, 5});
}

TEST_CASE("take along axis 1 picks columns of every row") {
  Array a = reshape(arange(10), {2, 5});  // a[i, j] = 5 i + j
  Array t = take(a, array<I>({4, -5, 2}), 1);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.to_vector<I>() == std::vector<I>{4, 0, 2, 9, 5, 7});
  CHECK(take(a, array<U>({1, 1}), -1).to_vector<I>() ==
        std::vector<I>{1, 1, 6, 6});
}

TEST_CASE(
    "take with a 2-D index array puts the index shape in place of the axis") {
  Array v = array<float>({10, 20, 30, 40});
  Array t = take(v, array<I>({0, 3, 1, 1}, {2, 2}), 0);
  CHECK(t.shape() == Shape{2, 2});
  CHECK(t.to_vector<float>() == std::vector<float>{10, 40, 20, 20});

  Array m = reshape(arange(6), {2, 3});  // m[i, j] = 3 i + j
  Array u = take(m, array<I>({2, 0, -1, 1}, {2, 2}), 1);
  CHECK(u.shape() == Shape{2, 2, 2});
  CHECK(u.to_vector<I>() == std::vector<I>{2, 0, 2, 1, 5, 3, 5, 4});
  // A 0-d index removes the axis.
  Array s = take(m, scalar<I>(1), 0);
  CHECK(s.shape() == Shape{3});
  CHECK(s.to_vector<I>() == std::vector<I>{3, 4, 5});
  CHECK(take(m, array<I>(std::vector<I>{}, {0}), 1).shape() == Shape{2, 0});
}

TEST_CASE("take copies bool and f64 elements unchanged") {
  Array b = array<bool>({true, false, false});
  CHECK(take(b, array<I>({2, 0, 1}), 0).to_vector<bool>() ==
        std::vector<bool>{false, true, false});
  Array d = array<double>({0.25, -1e300});
  CHECK(take(d, array<I>({1, 0}), 0).to_vector<double>() ==
        std::vector<double>{-1e300, 0.25});
}

TEST_CASE("take rejects out-of-range indices, bad index dtypes and None") {
  Array a = zeros({2, 5});
  CHECK_THROWS_WITH_AS(take(a, array<I>({0, 7}), 1),
                       "[take] index 7 is out of range for axis 1 of size 5",
                       IndexError);
  CHECK_THROWS_WITH_AS(take(a, array<I>({-6}), 1),
                       "[take] index -6 is out of range for axis 1 of size 5",
                       IndexError);
  CHECK_THROWS_WITH_AS(take(a, array<U>({2}), 0),
                       "[take] index 2 is out of range for axis 0 of size 2",
                       IndexError);
  CHECK_THROWS_WITH_AS(
      take(a, array<float>({0}), 0),
      doctest::Contains("[take] indices must be i32 or u32, got f32"),
      DTypeError);
  CHECK_THROWS_WITH_AS(take(a, array<I>({0}), 2),
                       "[take] axis 2 is out of range for an array of rank 2",
                       ShapeError);
  CHECK_THROWS_WITH_AS(take(Array(), array<I>({0}), 0),
                       "[take] the array input is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
  CHECK_THROWS_WITH_AS(take(a, Array(), 0),
                       "[take] the indices input is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
}

TEST_CASE("take_along_axis gathers per position along the axis") {
  Array a = array<I>({10, 30, 20, 60, 40, 50}, {2, 3});
  // The per-row argsort: gives each row in ascending order.
  Array order = array<I>({0, 2, 1, 1, 2, 0}, {2, 3});
  Array sorted = take_along_axis(a, order, 1);
  CHECK(sorted.shape() == Shape{2, 3});
  CHECK(sorted.to_vector<I>() == std::vector<I>{10, 20, 30, 40, 50, 60});
  // Along axis 0: out[0, j] = a[idx[0, j], j].
  Array down = take_along_axis(a, array<I>({1, 0, 1}, {1, 3}), 0);
  CHECK(down.shape() == Shape{1, 3});
  CHECK(down.to_vector<I>() == std::vector<I>{60, 30, 50});
  // Negative axis and negative indices.
  CHECK(
      take_along_axis(a, array<I>({-1, -3, 0, 0}, {2, 2}), -1).to_vector<I>() ==
      std::vector<I>{20, 10, 60, 60});
}

TEST_CASE("take_along_axis broadcasts the array and the indices off the axis") {
  Array a = array<I>({10, 30, 20, 60, 40, 50}, {2, 3});
  Array one = take_along_axis(a, array<I>({2}, {1, 1}), 1);
  CHECK(one.shape() == Shape{2, 1});
  CHECK(one.to_vector<I>() == std::vector<I>{20, 50});
  Array row = array<float>({1, 2, 3}, {1, 3});
  Array many = take_along_axis(row, array<U>({0, 2, 1, 2}, {2, 2}), 1);
  CHECK(many.shape() == Shape{2, 2});
  CHECK(many.to_vector<float>() == std::vector<float>{1, 3, 2, 3});
  // (2, 1, 2) array against (1, 3, 1) indices along axis 2: out is (2, 3, 1).
  Array cube = reshape(arange(4), {2, 1, 2});
  Array out = take_along_axis(cube, array<I>({1, 0, 1}, {1, 3, 1}), 2);
  CHECK(out.shape() == Shape{2, 3, 1});
  CHECK(out.to_vector<I>() == std::vector<I>{1, 0, 1, 3, 2, 3});
}

TEST_CASE("take_along_axis errors name the shapes and the bad index") {
  Array a = zeros({2, 3});
  CHECK_THROWS_WITH_AS(
      take_along_axis(a, array<I>({0, 1}), 1),
      "[take_along_axis] indices of shape (2,) must have the same "
      "rank as the array of shape (2, 3)",
      ShapeError);
  CHECK_THROWS_WITH_AS(
      take_along_axis(a, zeros({3, 1}, i32), 1),
      doctest::Contains("[take_along_axis] indices of shape (3, 1) "
                        "do not broadcast against the array of "
                        "shape (2, 3)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(
      take_along_axis(a, array<I>({3, 0}, {2, 1}), 1),
      "[take_along_axis] index 3 is out of range for axis 1 of size 3",
      IndexError);
  CHECK_THROWS_WITH_AS(
      take_along_axis(a, zeros({2, 1}, bool_), 1),
      doctest::Contains("[take_along_axis] indices must be i32 or "
                        "u32, got bool"),
      DTypeError);
  CHECK_THROWS_WITH_AS(
      take_along_axis(Array(), zeros({1}, i32), 0),
      doctest::Contains("[take_along_axis] the array input is None"),
      ValueError);
}

TEST_CASE("one_hot sets a 1 at each index along a new last axis") {
  Array h = one_hot(array<I>({0, 2, 1}), 3);
  CHECK(h.dtype() == f32);
  CHECK(h.shape() == Shape{3, 3});
  CHECK(h.to_vector<float>() == std::vector<float>{1, 0, 0, 0, 0, 1, 0, 1, 0});
  Array h2 = one_hot(array<U>({1, 0, 3, 3}, {2, 2}), 4, i32);
  CHECK(h2.shape() == Shape{2, 2, 4});
  CHECK(h2.to_vector<I>() ==
        std::vector<I>{0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(one_hot(scalar<I>(1), 2, bool_).to_vector<bool>() ==
        std::vector<bool>{false, true});
  CHECK(one_hot(array<I>({0, 1}), 0).shape() == Shape{2, 0});
}

TEST_CASE("one_hot gives an all-zero row for indices outside [0, depth)") {
  Array h = one_hot(array<I>({3, -1, 1, 100}), 3, f64);
  CHECK(h.to_vector<double>() ==
        std::vector<double>{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0});
  CHECK(one_hot(array<U>({0xffffffffu}), 2).to_vector<float>() ==
        std::vector<float>{0, 0});
}

TEST_CASE("one_hot rejects negative depth, non-integer indices and None") {
  CHECK_THROWS_WITH_AS(
      one_hot(array<I>({0}), -1),
      doctest::Contains("[one_hot] depth must be >= 0, got -1"), ValueError);
  CHECK_THROWS_WITH_AS(
      one_hot(array<float>({0}), 2),
      doctest::Contains("[one_hot] indices must be i32 or u32, got f32"),
      DTypeError);
  CHECK_THROWS_WITH_AS(one_hot(Array(), 2),
                       "[one_hot] indices input is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
}
