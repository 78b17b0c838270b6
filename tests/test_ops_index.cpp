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

TEST_CASE("scatter_add adds updates at their indices, repeated ones summed") {
  Array a = array<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  // Rows 0, 2, 0 (again) and -1 (= 2): take's layout, updates (4, 2).
  Array idx = array<I>({0, 2, 0, -1});
  Array upd = array<float>({10, 20, 30, 40, 50, 60, 70, 80}, {4, 2});
  Array r = scatter_add(a, idx, upd, 0);
  CHECK(r.shape() == Shape{3, 2});
  CHECK(r.to_vector<float>() == std::vector<float>{61, 82, 3, 4, 105, 126});
  // Along axis 1 with a 2-D index array: updates (3, 2, 2).
  Array b = zeros({3, 4}, i32);
  Array ub = reshape(arange(12), {3, 2, 2});
  Array rb = scatter_add(b, array<I>({3, 3, 0, 1}, {2, 2}), ub, 1);
  // row i: cols 3 += u[i,0,0] + u[i,0,1]; col 0 += u[i,1,0]; col 1 += u[i,1,1]
  CHECK(rb.to_vector<I>() == std::vector<I>{2, 3, 0, 1, 6, 7, 0, 9, 10, 11, 0, 17});
  // a itself is unchanged (arrays are values).
  CHECK(a.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("scatter writes updates, the last of repeated indices winning") {
  Array a = array<I>({0, 0, 0, 0});
  CHECK(scatter(a, array<I>({1, 3, 1, -3}), array<I>({5, 6, 7, 8}), 0).to_vector<I>() ==
        std::vector<I>{0, 8, 0, 6});
  Array flags = array<bool>({false, false, false});
  CHECK(scatter(flags, array<U>({2}), array<bool>({true}), 0).to_vector<bool>() ==
        std::vector<bool>{false, false, true});
}

TEST_CASE("scatter_add_along_axis is the transpose of take_along_axis") {
  Array a = zeros({2, 3});
  Array idx = array<I>({2, 2, 0, 1, -1, 1}, {2, 3});
  Array upd = array<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Array r = scatter_add_along_axis(a, idx, upd, 1);
  CHECK(r.to_vector<float>() == std::vector<float>{3, 0, 3, 0, 10, 5});
  // <take_along_axis(x, idx), u> == <x, scatter_add_along_axis(0, idx, u)>
  Array x = array<float>({0.5f, -1, 2, 3, 0.25f, 4}, {2, 3});
  const float lhs = sum(take_along_axis(x, idx, 1) * upd).item<float>();
  const float rhs = sum(x * r).item<float>();
  CHECK(lhs == doctest::Approx(rhs));
}

TEST_CASE("scatter_add sums many repeated indices in index order: bit-equal to the CPU") {
  // 4096 updates onto 3 rows of 5: float sums depend on their order, so equal
  // bits mean every backend adds in the same (index) order.
  std::vector<float> u(4096 * 5);
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = 1.0f / static_cast<float>(i % 977 + 1);
  std::vector<I> ix(4096);
  for (std::size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<I>((i * 7) % 3);
  Array upd = array<float>(u, {4096, 5});
  Array idx = array<I>(ix, {4096});
  Array base = ones({3, 5});
  Array r = scatter_add(base, idx, upd, 0);
  std::vector<float> want(15, 1.0f);
  for (std::size_t k = 0; k < ix.size(); ++k) {
    for (std::size_t q = 0; q < 5; ++q) want[static_cast<std::size_t>(ix[k]) * 5 + q] += u[k * 5 + q];
  }
  CHECK(r.to_vector<float>() == want);
  CHECK(scatter_add(base, idx, upd, 0).to_vector<float>() == want);  // and every time
}

TEST_CASE("scatter errors name the op, the shapes and the bad index") {
  Array a = zeros({3, 2});
  CHECK_THROWS_WITH_AS(scatter_add(a, array<I>({0, 1}), zeros({3, 2}), 0),
                       doctest::Contains("[scatter_add] updates of shape (3, 2) must have shape (2, 2)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(scatter_add(a, array<I>({0, 3}), zeros({2, 2}), 0),
                       doctest::Contains("[scatter_add] index 3 is out of range for axis 0 of size 3"),
                       IndexError);
  CHECK_THROWS_WITH_AS(scatter(a, array<I>({0}), zeros({1, 2}, i32), 0),
                       doctest::Contains("[scatter] updates are i32 but the array is f32"), DTypeError);
  CHECK_THROWS_WITH_AS(scatter_add(zeros({2}, DType::kBool), array<I>({0}), zeros({1}, DType::kBool), 0),
                       doctest::Contains("[scatter_add] cannot add bool updates"), DTypeError);
  CHECK_THROWS_WITH_AS(scatter_add(a, array<float>({0}), zeros({1, 2}), 0),
                       doctest::Contains("[scatter_add] indices must be i32 or u32"), DTypeError);
  CHECK_THROWS_WITH_AS(scatter_add_along_axis(a, array<I>({0, 1}, {1, 2}), zeros({1, 2}), 1),
                       doctest::Contains("[scatter_add_along_axis] indices of shape (1, 2) must have "
                                         "the shape of the array (3, 2) except along axis 1"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(scatter_add(a, array<I>({0}), zeros({1, 2}), 2),
                       doctest::Contains("[scatter_add]"), Error);
}

TEST_CASE("take of arrays whose axes differ in length but give one result shape: no stale kernel") {
  // The gather kernel bakes in the axis length (negative indices wrap by it):
  // a kernel built for length 12 must not serve length 9.
  CHECK(take(astype(arange(12), f32), array<I>({0, 2, 1}), 0).to_vector<float>() ==
        std::vector<float>{0, 2, 1});
  CHECK(take(astype(arange(9), f32), array<I>({-1, 0, 1}), 0).to_vector<float>() ==
        std::vector<float>{8, 0, 1});
  CHECK(take_along_axis(astype(arange(12), f32), array<I>({-1, 0}), 0).to_vector<float>() ==
        std::vector<float>{11, 0});
  CHECK(take_along_axis(astype(arange(7), f32), array<I>({-1, 0}), 0).to_vector<float>() ==
        std::vector<float>{6, 0});
}

TEST_CASE("dynamic_slice and dynamic_update_slice take array starts, wrapped and clamped as JAX does") {
  Array m = reshape(astype(arange(20), f32), {4, 5});  // m[i, j] = 5 i + j
  Array s = dynamic_slice(m, {scalar<I>(1), scalar<I>(2)}, {2, 3});
  CHECK(s.shape() == Shape{2, 3});
  CHECK(s.to_vector<float>() == std::vector<float>{7, 8, 9, 12, 13, 14});
  // Starts past the end are clamped so the block fits; a negative start counts
  // from the end once, then is clamped (jax.lax.dynamic_slice: -4 -> 1, -9 -> -4 -> 0).
  CHECK(dynamic_slice(m, {scalar<I>(3), scalar<I>(-4)}, {2, 2}).to_vector<float>() ==
        std::vector<float>{11, 12, 16, 17});
  CHECK(dynamic_slice(m, {scalar<I>(-1), scalar<I>(-9)}, {2, 2}).to_vector<float>() ==
        std::vector<float>{10, 11, 15, 16});
  CHECK(dynamic_slice(m, {scalar<U>(9), scalar<U>(0)}, {1, 5}).to_vector<float>() ==
        std::vector<float>{15, 16, 17, 18, 19});
  Array u = dynamic_update_slice(m, full({2, 2}, -1), {scalar<I>(2), scalar<I>(4)});
  // Clamped to start (2, 3): rows 2-3, columns 3-4.
  CHECK(u.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                                   10, 11, 12, -1, -1, 15, 16, 17, -1, -1});
  CHECK(m.to_vector<float>()[13] == 13.0f);  // m itself is unchanged
  // A negative update start wraps too: -2 -> row 2.
  Array w = dynamic_update_slice(m, full({1, 5}, -1), {scalar<I>(-2), scalar<I>(0)});
  CHECK(w.to_vector<float>()[10] == -1.0f);
  CHECK(w.to_vector<float>()[9] == 9.0f);
}

TEST_CASE("dynamic_slice with a traced start compiles once for every start") {
  Array v = astype(arange(10), f32);
  int traces = 0;
  auto window = filter_jit([&](const Array& x, const Array& at) {
    ++traces;
    return dynamic_slice(x, {at}, {3});
  });
  CHECK(window(v, scalar<I>(0)).to_vector<float>() == std::vector<float>{0, 1, 2});
  CHECK(window(v, scalar<I>(4)).to_vector<float>() == std::vector<float>{4, 5, 6});
  CHECK(window(v, scalar<I>(9)).to_vector<float>() == std::vector<float>{7, 8, 9});
  CHECK(traces == 1);
  // Gradients: the block's gradient lands where the block was read; the
  // update's gradient is what survives of g at its position.
  auto read = [](const Array& x) {
    return sum(dynamic_slice(x, {scalar<I>(1)}, {2}) * array<float>({10, 100}));
  };
  CHECK(grad(read)(array<float>({1, 2, 3, 4})).to_vector<float>() == std::vector<float>{0, 10, 100, 0});
  auto write = [](const Array& upd) {
    Array base = zeros({4});
    return sum(dynamic_update_slice(base, upd, {scalar<I>(2)}) * array<float>({1, 2, 3, 4}));
  };
  CHECK(grad(write)(array<float>({5, 6})).to_vector<float>() == std::vector<float>{3, 4});
}

TEST_CASE("dynamic slice errors name the op and what does not fit") {
  Array m = zeros({4, 5});
  CHECK_THROWS_WITH_AS(dynamic_slice(m, {scalar<I>(0)}, {1}),
                       doctest::Contains("[dynamic_slice] got 1 start indices for an array of rank 2"),
                       ValueError);
  CHECK_THROWS_WITH_AS(dynamic_slice(m, {scalar<I>(0), scalar<I>(0)}, {5, 1}),
                       doctest::Contains("[dynamic_slice] size 5 of axis 0 does not fit"), ShapeError);
  CHECK_THROWS_WITH_AS(dynamic_slice(m, {scalar<float>(0), scalar<I>(0)}, {1, 1}),
                       doctest::Contains("[dynamic_slice] start index 0 must be a 0-d i32 or u32 array"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(dynamic_update_slice(m, zeros({5, 1}), {scalar<I>(0), scalar<I>(0)}),
                       doctest::Contains("[dynamic_update_slice] an update of shape (5, 1) does not fit"),
                       ShapeError);
}

TEST_CASE("dynamic_update_slice refuses an update of another dtype, naming both") {
  CHECK_THROWS_WITH_AS(dynamic_update_slice(zeros({4}), zeros({2}, i32), {scalar<I>(0)}),
                       doctest::Contains("[dynamic_update_slice] the update is i32 but the array is f32"),
                       DTypeError);
}
