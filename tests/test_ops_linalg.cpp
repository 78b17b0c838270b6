// matmul: numpy.matmul semantics (1-D promotion, batch broadcasting, empty
// dims) and its errors. Expected values are worked out by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <kiln/kiln.hpp>
#include <vector>

using namespace kiln;

namespace {

// [[1, 2, 3], [4, 5, 6]] and [[7, 8], [9, 10], [11, 12]].
Array a23() { return array<float>({1, 2, 3, 4, 5, 6}, {2, 3}); }
Array b32() { return array<float>({7, 8, 9, 10, 11, 12}, {3, 2}); }

}  // namespace

TEST_CASE("matmul of two matrices is the row-by-column product") {
  Array c = matmul(a23(), b32());
  CHECK(c.dtype() == f32);
  CHECK(c.shape() == Shape{2, 2});
  // [1*7 + 2*9 + 3*11, 1*8 + 2*10 + 3*12], [4*7 + 5*9 + 6*11, 4*8 + 5*10 +
  // 6*12]
  CHECK(c.to_vector<float>() == std::vector<float>{58, 64, 139, 154});
}

TEST_CASE("matmul works in f64") {
  Array a = array<double>({1.5, 2, 3, 4}, {2, 2});
  Array b = array<double>({2, 0, 1, 0.25}, {2, 2});
  Array c = matmul(a, b);
  CHECK(c.dtype() == f64);
  CHECK(c.to_vector<double>() == std::vector<double>{5, 0.5, 10, 1});
}

TEST_CASE("matmul broadcasts batch dimensions") {
  // A0 = I, A1 = 2I against B0, B1, B2: every pair (Ai, Bj) gives (i+1) * Bj.
  Array a = array<float>({1, 0, 0, 1, 2, 0, 0, 2}, {2, 1, 2, 2});
  Array b = array<float>({1, 2, 3, 4, 0, 1, 1, 0, 1, 1, 1, 1}, {3, 2, 2});
  Array c = matmul(a, b);
  CHECK(c.shape() == Shape{2, 3, 2, 2});
  CHECK(c.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 0, 1, 1, 0,
                                                   1, 1, 1, 1, 2, 4, 6, 8,
                                                   0, 2, 2, 0, 2, 2, 2, 2});
}

TEST_CASE(
    "matmul of a batch against one matrix multiplies each batch element") {
  Array a = array<float>({1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 1, 0}, {2, 2, 3});
  Array c = matmul(a, b32());
  CHECK(c.shape() == Shape{2, 2, 2});
  CHECK(c.to_vector<float>() ==
        std::vector<float>{58, 64, 139, 154, 7, 8, 9, 10});
}

TEST_CASE("matmul of one matrix against a batch reuses the matrix") {
  Array a = array<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  // Identity, then the column swap.
  Array b = array<float>({1, 0, 0, 1, 0, 1, 1, 0}, {2, 2, 2});
  Array c = matmul(a, b);
  CHECK(c.shape() == Shape{2, 3, 2});
  CHECK(c.to_vector<float>() ==
        std::vector<float>{1, 2, 3, 4, 5, 6, 2, 1, 4, 3, 6, 5});
}

TEST_CASE("matmul promotes a 1-D first operand to a row and drops it after") {
  Array v = array<float>({1, 2, 3});
  Array c = matmul(v, b32());
  CHECK(c.shape() == Shape{2});
  CHECK(c.to_vector<float>() == std::vector<float>{58, 64});
}

TEST_CASE(
    "matmul promotes a 1-D second operand to a column and drops it after") {
  Array c = matmul(a23(), array<float>({1, 1, 1}));
  CHECK(c.shape() == Shape{2});
  CHECK(c.to_vector<float>() == std::vector<float>{6, 15});
}

TEST_CASE("matmul of two vectors is their dot product as a 0-d array") {
  Array c = matmul(array<float>({1, 2, 3}), array<float>({4, 5, 6}));
  CHECK(c.shape() == Shape{});
  CHECK(c.item<float>() == 32.0f);
}

TEST_CASE("matmul of a vector against a batch of matrices keeps the batch") {
  Array b = array<float>({1, 2, 3, 4, 0, 1, 1, 0}, {2, 2, 2});
  Array c = matmul(array<float>({1, 1}), b);
  CHECK(c.shape() == Shape{2, 2});
  CHECK(c.to_vector<float>() == std::vector<float>{4, 6, 1, 1});
}

TEST_CASE("matmul over an empty inner dimension gives zeros") {
  Array c = matmul(zeros({2, 0}), zeros({0, 3}));
  CHECK(c.shape() == Shape{2, 3});
  CHECK(c.to_vector<float>() == std::vector<float>(6, 0.0f));
  Array batched = matmul(zeros({2, 2, 0}, f64), zeros({0, 1}, f64));
  CHECK(batched.shape() == Shape{2, 2, 1});
  CHECK(batched.to_vector<double>() == std::vector<double>(4, 0.0));
}

TEST_CASE(
    "matmul with an empty outer or batch dimension gives an empty result") {
  CHECK(matmul(zeros({0, 3}), zeros({3, 2})).shape() == Shape{0, 2});
  CHECK(matmul(zeros({2, 3}), zeros({3, 0})).shape() == Shape{2, 0});
  CHECK(matmul(zeros({0, 2, 3}), zeros({3, 4})).shape() == Shape{0, 2, 4});
  CHECK(matmul(zeros({0, 1, 1, 3}), zeros({5, 3, 4})).shape() ==
        Shape{0, 5, 1, 4});
}

TEST_CASE("matmul rejects mismatched inner dimensions naming both shapes") {
  CHECK_THROWS_WITH_AS(
      matmul(zeros({2, 3}), zeros({4, 5})),
      "[matmul] last dimension of the first input (2, 3) must match the "
      "second-to-last dimension of the second input (4, 5)",
      ShapeError);
  CHECK_THROWS_WITH_AS(
      matmul(zeros({2, 3}), zeros({4})),
      "[matmul] last dimension of the first input (2, 3) must match the only "
      "dimension of the second input (4,)",
      ShapeError);
}

TEST_CASE("matmul rejects batch dimensions that do not broadcast") {
  CHECK_THROWS_WITH_AS(
      matmul(zeros({2, 2, 3}), zeros({3, 3, 4})),
      doctest::Contains("[matmul] batch dimensions of the first "
                        "input (2, 2, 3) and the second input "
                        "(3, 3, 4) cannot be broadcast"),
      ShapeError);
}

TEST_CASE(
    "matmul in f16 accumulates in f32 and rounds once: the f32 product of the "
    "same halves, to f16 precision, and differentiable") {
  // Values of a few ulps of f16 each, summed over k = 64: a running f16 sum
  // would lose the small terms; the rounded f32 sum keeps them.
  std::vector<float> av, bv;
  for (int i = 0; i < 3 * 64; ++i) av.push_back(0.25f + 0.001f * (i % 17));
  for (int i = 0; i < 64 * 5; ++i) bv.push_back(1.0f - 0.0625f * (i % 7));
  const Array a = astype(array<float>(av, {3, 64}), f16);
  const Array b = astype(array<float>(bv, {64, 5}), f16);
  const Array c = matmul(a, b);
  CHECK(c.dtype() == f16);
  CHECK(c.shape() == Shape{3, 5});
  const std::vector<float> want =
      matmul(astype(a, f32), astype(b, f32)).to_vector<float>();
  const std::vector<float> got = astype(c, f32).to_vector<float>();
  for (std::size_t i = 0; i < want.size(); ++i) {
    // One rounding to f16: half an ulp, 2^-11 relative.
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(std::ldexp(1.0, -11)));
  }
  // The vjp is two more f16 matmuls: the gradient of sum(a @ b) by a is each
  // row sum of b, the same halves in f32.
  const Array ga = grad([](const Array& x, const Array& y) {
    return sum(astype(matmul(x, y), f32));
  })(a, b);
  CHECK(ga.dtype() == f16);
  const std::vector<float> row_sums = sum(astype(b, f32), 1).to_vector<float>();
  const std::vector<float> g = astype(ga, f32).to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    CHECK(g[i] ==
          doctest::Approx(row_sums[i % 64]).epsilon(std::ldexp(1.0, -11)));
  }
}

TEST_CASE("matmul rejects non-floating, mixed, 0-d and None inputs") {
  Array i = array<std::int32_t>({1, 2, 3, 4}, {2, 2});
  CHECK_THROWS_WITH_AS(
      matmul(i, i),
      doctest::Contains("[matmul] needs floating inputs (f16, bf16, f32 "
                        "or f64), got i32"),
      DTypeError);
  CHECK_THROWS_WITH_AS(
      matmul(zeros({2, 2}), zeros({2, 2}, f64)),
      doctest::Contains("[matmul] inputs have different dtypes "
                        "f32 and f64"),
      DTypeError);
  CHECK_THROWS_WITH_AS(
      matmul(scalar(2.0f), zeros({2})),
      doctest::Contains("[matmul] inputs must have at least one "
                        "dimension, got shapes () and (2,)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(matmul(Array(), zeros({2})),
                       "[matmul] the first input is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
  CHECK_THROWS_WITH_AS(matmul(zeros({2}), Array()),
                       "[matmul] the second input is None (a null Array; a field left out of its struct's KILN_MODULE(...) is None after grad or filter_jit)",
                       ValueError);
}
