// Layout ops: reshape, transpose/permute, broadcast_to, expand_dims, squeeze,
// concatenate, slice, on every dtype, and their errors. Expected values follow
// the numpy rules, written out by hand or from index formulas.
#include <doctest/doctest.h>

#include <cstdint>
#include <kiln/kiln.hpp>
#include <vector>

using namespace kiln;

namespace {

using I = std::int32_t;

// (2, 3, 4) with a[i, j, k] = 12 i + 4 j + k.
Array iota234() { return reshape(arange(24), {2, 3, 4}); }

}  // namespace

TEST_CASE("reshape infers one -1 dimension and keeps the element order") {
  Array a = arange(6);
  Array r = reshape(a, {2, -1});
  CHECK(r.shape() == Shape{2, 3});
  CHECK(r.dtype() == i32);
  CHECK(r.to_vector<I>() == std::vector<I>{0, 1, 2, 3, 4, 5});
  CHECK(reshape(r, {-1}).shape() == Shape{6});
  CHECK(reshape(r, {3, 1, -1}).shape() == Shape{3, 1, 2});
  CHECK(reshape(scalar(5.0f), {1, 1}).shape() == Shape{1, 1});
  CHECK(reshape(zeros({2, 0}), {0, 7}).shape() == Shape{0, 7});
  if (a.device() == Device::cpu()) {
    CHECK(r.buffer() == a.buffer());  // immutable: no copy needed
  }
}

TEST_CASE("reshape errors name both shapes") {
  Array a = arange(6);
  CHECK_THROWS_WITH_AS(
      reshape(reshape(a, {2, 3}), {4, 2}),
      "[reshape] cannot reshape (2, 3) (6 elements) into (4, 2)", ShapeError);
  CHECK_THROWS_WITH_AS(
      reshape(a, {-1, -1}),
      doctest::Contains("[reshape] cannot reshape (6,) into (-1, "
                        "-1): only one dimension can be -1"),
      ShapeError);
  CHECK_THROWS_WITH_AS(reshape(a, {-2, -3}),
                       doctest::Contains("dimensions must be >= 0"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(
      reshape(a, {4, -1}),
      "[reshape] cannot reshape (6,) (6 elements) into (4, -1)", ShapeError);
  CHECK_THROWS_WITH_AS(
      reshape(zeros({0}), {0, -1}),
      doctest::Contains("[reshape] cannot infer the -1 in (0, -1)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(reshape(Array(), {1}),
                       "[reshape] input is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)", ValueError);
}

TEST_CASE("transpose reverses the axes by default") {
  Array t = transpose(iota234());
  REQUIRE(t.shape() == Shape{4, 3, 2});
  std::vector<I> expected;
  for (I k = 0; k < 4; ++k)
    for (I j = 0; j < 3; ++j)
      for (I i = 0; i < 2; ++i) expected.push_back(12 * i + 4 * j + k);
  CHECK(t.to_vector<I>() == expected);
  Array m = array<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(transpose(m).to_vector<float>() ==
        std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(transpose(arange(3)).to_vector<I>() == std::vector<I>{0, 1, 2});
}

TEST_CASE("transpose and permute follow an explicit permutation") {
  Array a = iota234();
  Array t = transpose(a, {1, 0, 2});  // t[j, i, k] = a[i, j, k]
  REQUIRE(t.shape() == Shape{3, 2, 4});
  std::vector<I> expected;
  for (I j = 0; j < 3; ++j)
    for (I i = 0; i < 2; ++i)
      for (I k = 0; k < 4; ++k) expected.push_back(12 * i + 4 * j + k);
  CHECK(t.to_vector<I>() == expected);

  Array p = permute(a, {2, 0, 1});  // p[k, i, j] = a[i, j, k]
  REQUIRE(p.shape() == Shape{4, 2, 3});
  expected.clear();
  for (I k = 0; k < 4; ++k)
    for (I i = 0; i < 2; ++i)
      for (I j = 0; j < 3; ++j) expected.push_back(12 * i + 4 * j + k);
  CHECK(p.to_vector<I>() == expected);
  CHECK(transpose(a, {-1, 0, -2}).to_vector<I>() == expected);
  CHECK(transpose(a, {0, 1, 2}).to_vector<I>() == a.to_vector<I>());
}

TEST_CASE(
    "transpose swaps the last two axes of large, unevenly sized batches") {
  // Sizes that are not multiples of any tile size, with a batch dim in front.
  const I b = 2, m = 37, n = 45;
  Array a =
      reshape(arange(b * m * n), {b, m, n});  // a[i, j, k] = m n i + n j + k
  Array t = transpose(a, {0, 2, 1});
  REQUIRE(t.shape() == Shape{b, n, m});
  std::vector<I> expected;
  for (I i = 0; i < b; ++i)
    for (I k = 0; k < n; ++k)
      for (I j = 0; j < m; ++j) expected.push_back(m * n * i + n * j + k);
  CHECK(t.to_vector<I>() == expected);
  Array w = reshape(arange(70 * 33, f64), {70, 33});
  std::vector<double> wt;
  for (int k = 0; k < 33; ++k)
    for (int j = 0; j < 70; ++j) wt.push_back(33.0 * j + k);
  CHECK(transpose(w).to_vector<double>() == wt);
}

TEST_CASE("transpose rejects anything but a permutation of the axes") {
  Array m = zeros({2, 3});
  CHECK_THROWS_WITH_AS(
      transpose(m, {0, 0}),
      doctest::Contains("[transpose] permutation (0, 0) is not a "
                        "permutation of 2 axes"),
      ShapeError);
  CHECK_THROWS_WITH_AS(
      transpose(m, {0}),
      doctest::Contains("[transpose] permutation (0,) is not a "
                        "permutation of 2 axes"),
      ShapeError);
  CHECK_THROWS_WITH_AS(
      permute(m, {0, 2}),
      "[permute] axis 2 is out of range for an array of rank 2", ShapeError);
  CHECK_THROWS_WITH_AS(transpose(Array()),
                       "[transpose] input is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)", ValueError);
}

TEST_CASE("broadcast_to repeats size-1 and missing leading dimensions") {
  Array row = array<I>({1, 2, 3});
  Array b = broadcast_to(row, {2, 3});
  CHECK(b.shape() == Shape{2, 3});
  CHECK(b.to_vector<I>() == std::vector<I>{1, 2, 3, 1, 2, 3});
  Array col = array<I>({1, 2}, {2, 1});
  CHECK(broadcast_to(col, {2, 2, 3}).to_vector<I>() ==
        std::vector<I>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
  CHECK(broadcast_to(scalar(7.0f), {2, 2}).to_vector<float>() ==
        std::vector<float>{7, 7, 7, 7});
  CHECK(broadcast_to(row, {3}).to_vector<I>() == std::vector<I>{1, 2, 3});
  // A size-1 middle dim and a new leading dim: out[n, i, j, k] = a[i, 0, k] = 3
  // i + k.
  Array mid = broadcast_to(reshape(arange(6), {2, 1, 3}), {2, 2, 4, 3});
  std::vector<I> expected;
  for (I n = 0; n < 2; ++n)
    for (I i = 0; i < 2; ++i)
      for (I j = 0; j < 4; ++j)
        for (I k = 0; k < 3; ++k) expected.push_back(3 * i + k);
  CHECK(mid.to_vector<I>() == expected);

  CHECK(broadcast_to(zeros({1, 3}), {0, 3}).shape() == Shape{0, 3});
}

TEST_CASE("broadcast_to rejects shapes numpy cannot broadcast to") {
  CHECK_THROWS_WITH_AS(
      broadcast_to(zeros({2, 3}), {4, 3}),
      doctest::Contains("[broadcast_to] cannot broadcast shape "
                        "(2, 3) to shape (4, 3)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(
      broadcast_to(zeros({3}), {3, 2}),
      doctest::Contains("cannot broadcast shape (3,) to shape (3, 2)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(
      broadcast_to(zeros({2, 3}), {3}),
      doctest::Contains("cannot broadcast shape (2, 3) to shape (3,)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(broadcast_to(zeros({1}), {-1}),
                       doctest::Contains("to shape (-1,)"), ShapeError);
}

TEST_CASE(
    "expand_dims inserts a size-1 axis, counting negative axes from the end") {
  Array a = reshape(arange(6), {2, 3});
  CHECK(expand_dims(a, 0).shape() == Shape{1, 2, 3});
  CHECK(expand_dims(a, 1).shape() == Shape{2, 1, 3});
  CHECK(expand_dims(a, 2).shape() == Shape{2, 3, 1});
  CHECK(expand_dims(a, -1).shape() == Shape{2, 3, 1});
  CHECK(expand_dims(a, -3).shape() == Shape{1, 2, 3});
  CHECK(expand_dims(a, -1).to_vector<I>() == a.to_vector<I>());
  CHECK(expand_dims(scalar(1.0f), 0).shape() == Shape{1});
  CHECK_THROWS_WITH_AS(
      expand_dims(a, 3),
      doctest::Contains("[expand_dims] axis 3 is out of range for "
                        "expanding an array of shape (2, 3)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(expand_dims(a, -4),
                       doctest::Contains("[expand_dims] axis -4"), ShapeError);
}

TEST_CASE("squeeze removes size-1 axes: all by default, or the named ones") {
  Array a = reshape(arange(6), {1, 2, 1, 3});
  CHECK(squeeze(a).shape() == Shape{2, 3});
  CHECK(squeeze(a).to_vector<I>() == std::vector<I>{0, 1, 2, 3, 4, 5});
  CHECK(squeeze(a, -2).shape() == Shape{1, 2, 3});
  CHECK(squeeze(a, 0).shape() == Shape{2, 1, 3});
  CHECK(squeeze(a, {0, -2}).shape() == Shape{2, 3});
  CHECK(squeeze(zeros({1, 1})).shape() == Shape{});
  CHECK(squeeze(zeros({2, 3})).shape() == Shape{2, 3});
  CHECK_THROWS_WITH_AS(
      squeeze(a, 1),
      "[squeeze] cannot squeeze axis 1 of shape (1, 2, 1, 3): its "
      "size is 2, not 1",
      ShapeError);
  CHECK_THROWS_WITH_AS(squeeze(a, {0, -4}),
                       doctest::Contains("[squeeze] repeated axis"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(squeeze(a, 4),
                       doctest::Contains("[squeeze] axis 4 is out of range"),
                       ShapeError);
}

TEST_CASE("concatenate joins arrays along axis 0") {
  Array a = array<I>({1, 2, 3, 4}, {2, 2});
  Array b = array<I>({5, 6}, {1, 2});
  Array c = concatenate({a, b});
  CHECK(c.shape() == Shape{3, 2});
  CHECK(c.to_vector<I>() == std::vector<I>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("concatenate joins arrays along an inner axis") {
  Array a = array<I>({1, 2}, {2, 1});
  Array b = array<I>({3, 4, 5, 6}, {2, 2});
  Array c = concatenate({a, b, a}, 1);
  CHECK(c.shape() == Shape{2, 4});
  CHECK(c.to_vector<I>() == std::vector<I>{1, 3, 4, 1, 2, 5, 6, 2});
  // Last axis of a 3-D array, given as -1: x[i, j, :] then y[i, j, :].
  Array x = reshape(arange(4), {2, 1, 2});
  Array y = reshape(arange(10, 12), {2, 1, 1});
  Array z = concatenate({x, y}, -1);
  CHECK(z.shape() == Shape{2, 1, 3});
  CHECK(z.to_vector<I>() == std::vector<I>{0, 1, 10, 2, 3, 11});
  // Middle axis of a 3-D array.
  Array m = concatenate({x, reshape(arange(20, 28), {2, 2, 2})}, 1);
  CHECK(m.shape() == Shape{2, 3, 2});
  CHECK(m.to_vector<I>() ==
        std::vector<I>{0, 1, 20, 21, 22, 23, 2, 3, 24, 25, 26, 27});
}

TEST_CASE("concatenate skips empty arrays and can produce an empty result") {
  Array a = array<float>({1, 2, 3, 4}, {2, 2});
  CHECK(concatenate({zeros({0, 2}), a}).to_vector<float>() ==
        std::vector<float>{1, 2, 3, 4});
  Array c = concatenate({a, zeros({2, 0})}, 1);
  CHECK(c.shape() == Shape{2, 2});
  CHECK(c.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(concatenate({zeros({0, 3}), zeros({0, 3})}).shape() == Shape{0, 3});
  CHECK(concatenate({a}).to_vector<float>() == a.to_vector<float>());
}

TEST_CASE("concatenate errors name the offending array and both shapes") {
  Array a = zeros({2, 2});
  CHECK_THROWS_WITH_AS(
      concatenate({a, zeros({2, 2}), zeros({2, 3})}),
      "[concatenate] array 2 has shape (2, 3) but array 0 has shape "
      "(2, 2): all dimensions except axis 0 must match",
      ShapeError);
  CHECK_THROWS_WITH_AS(
      concatenate({a, zeros({2})}),
      doctest::Contains("[concatenate] array 1 has shape (2,) but "
                        "array 0 has shape (2, 2)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(
      concatenate({a, zeros({2, 2}, i32)}),
      "[concatenate] array 1 has dtype i32 but array 0 has dtype f32",
      DTypeError);
  CHECK_THROWS_WITH_AS(concatenate(std::span<const Array>()),
                       "[concatenate] needs at least one array", ValueError);
  CHECK_THROWS_WITH_AS(concatenate({a, Array()}),
                       "[concatenate] array 1 is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
  CHECK_THROWS_WITH_AS(
      concatenate({scalar(1.0f), scalar(2.0f)}),
      doctest::Contains("[concatenate] zero-dimensional arrays"), ShapeError);
  CHECK_THROWS_WITH_AS(
      concatenate({a, a}, 2),
      "[concatenate] axis 2 is out of range for an array of rank 2",
      ShapeError);
}

TEST_CASE(
    "slice follows Python start:stop:step with negative and clamped bounds") {
  Array a = arange(10);
  CHECK(slice_axis(a, 0, 2, 8, 3).to_vector<I>() == std::vector<I>{2, 5});
  CHECK(slice_axis(a, 0, -3, 10).to_vector<I>() == std::vector<I>{7, 8, 9});
  CHECK(slice_axis(a, 0, -100, 100).to_vector<I>() == a.to_vector<I>());
  CHECK(slice_axis(a, 0, 5, 100, 2).to_vector<I>() == std::vector<I>{5, 7, 9});
  CHECK(slice_axis(a, 0, 8, -1).to_vector<I>() == std::vector<I>{8});
  CHECK(slice_axis(a, 0, 1, -1, 4).to_vector<I>() == std::vector<I>{1, 5});
  CHECK(slice_axis(a, 0, 0, 10, 20).to_vector<I>() == std::vector<I>{0});
  Array empty = slice_axis(a, 0, 7, 3);
  CHECK(empty.shape() == Shape{0});
  CHECK(slice_axis(a, 0, 20, 30).shape() == Shape{0});
}

TEST_CASE("slice along an inner axis and over several axes") {
  Array m = reshape(arange(12), {3, 4});  // m[i, j] = 4 i + j
  Array cols = slice_axis(m, 1, 1, -1);
  CHECK(cols.shape() == Shape{3, 2});
  CHECK(cols.to_vector<I>() == std::vector<I>{1, 2, 5, 6, 9, 10});
  CHECK(slice_axis(m, -1, 3, 4).to_vector<I>() == std::vector<I>{3, 7, 11});
  Array both = slice(m, Shape{1, 0}, Shape{3, 4}, Shape{1, 2});
  CHECK(both.shape() == Shape{2, 2});
  CHECK(both.to_vector<I>() == std::vector<I>{4, 6, 8, 10});
  Array row = slice(m, Shape{-2}, Shape{-1});  // leading axes only
  CHECK(row.shape() == Shape{1, 4});
  CHECK(row.to_vector<I>() == std::vector<I>{4, 5, 6, 7});
  Array cube = iota234();
  Array s = slice(cube, Shape{1, 0, 1}, Shape{2, 3, 4}, Shape{1, 2, 2});
  CHECK(s.shape() == Shape{1, 2, 2});
  CHECK(s.to_vector<I>() == std::vector<I>{13, 15, 21, 23});
}

TEST_CASE("slice errors: non-positive step, mismatched bound lists, bad axes") {
  Array m = zeros({3, 4});
  CHECK_THROWS_WITH_AS(
      slice_axis(m, 0, 0, 3, 0),
      doctest::Contains("[slice] step must be positive, got 0"), ValueError);
  CHECK_THROWS_WITH_AS(
      slice_axis(m, 1, 3, 0, -1),
      doctest::Contains("[slice] step must be positive, got -1"), ValueError);
  CHECK_THROWS_WITH_AS(slice(m, Shape{0, 1}, Shape{2}),
                       doctest::Contains("[slice] starts (0, 1), stops (2,)"),
                       ValueError);
  CHECK_THROWS_WITH_AS(slice(m, Shape{0, 0, 0}, Shape{1, 1, 1}),
                       "[slice] 3 axes given for an array of shape (3, 4)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(slice_axis(m, 2, 0, 1),
                       "[slice] axis 2 is out of range for an array of rank 2",
                       ShapeError);
  CHECK_THROWS_WITH_AS(slice_axis(Array(), 0, 0, 1),
                       "[slice] input is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)", ValueError);
}

TEST_CASE("layout ops move bool elements unchanged") {
  Array b = array<bool>({true, false, false, true, true, false}, {2, 3});
  CHECK(transpose(b).to_vector<bool>() ==
        std::vector<bool>{true, true, false, true, false, false});
  CHECK(concatenate({b, slice_axis(b, 0, 1, 2)}).to_vector<bool>() ==
        std::vector<bool>{true, false, false, true, true, false, true, true,
                          false});
  CHECK(broadcast_to(slice_axis(b, 1, 0, 1), {2, 2}).to_vector<bool>() ==
        std::vector<bool>{true, true, true, true});
  CHECK(reshape(b, {3, 2}).dtype() == bool_);
  CHECK(squeeze(expand_dims(b, 1)).to_vector<bool>() == b.to_vector<bool>());
}

TEST_CASE("layout ops move 4- and 8-byte elements bit for bit") {
  Array u = array<std::uint32_t>({0xffffffffu, 1, 2, 3}, {2, 2});
  CHECK(transpose(u).to_vector<std::uint32_t>() ==
        std::vector<std::uint32_t>{0xffffffffu, 2, 1, 3});
  Array d = array<double>({0.5, -1.25, 1e300, 3}, {2, 2});
  CHECK(transpose(d).to_vector<double>() ==
        std::vector<double>{0.5, 1e300, -1.25, 3});
  CHECK(slice_axis(d, 1, 1, 2).to_vector<double>() == std::vector<double>{-1.25, 3});
  CHECK(concatenate({d, d}, 1).to_vector<double>() ==
        std::vector<double>{0.5, -1.25, 0.5, -1.25, 1e300, 3, 1e300, 3});
  Array n = array<I>({-1, -2}, {2});
  CHECK(broadcast_to(n, {2, 2}).to_vector<I>() ==
        std::vector<I>{-1, -2, -1, -2});
}
