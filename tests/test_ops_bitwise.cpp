// Bitwise ops and bitcast: hand-computed values on i32/u32/bool, broadcasting
// and scalar operands, shifts by amounts outside [0, 32) (0, never UB), and every
// error message. Device generic: arrays live on the default device.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <kiln/kiln.hpp>
#include <vector>

using namespace kiln;

namespace {
using I32 = std::int32_t;
using U32 = std::uint32_t;
}  // namespace

TEST_CASE("bitwise and, or, xor and not on u32 and i32") {
  Array a = array<U32>({0xF0F0F0F0u, 0x12345678u, 0xFFFFFFFFu, 0u});
  Array b = array<U32>({0x0FF00FF0u, 0x0000FFFFu, 0x80000001u, 0u});
  CHECK(bitwise_and(a, b).to_vector<U32>() ==
        std::vector<U32>{0x00F000F0u, 0x00005678u, 0x80000001u, 0u});
  CHECK(bitwise_or(a, b).to_vector<U32>() ==
        std::vector<U32>{0xFFF0FFF0u, 0x1234FFFFu, 0xFFFFFFFFu, 0u});
  CHECK(bitwise_xor(a, b).to_vector<U32>() ==
        std::vector<U32>{0xFF00FF00u, 0x1234A987u, 0x7FFFFFFEu, 0u});
  CHECK(bitwise_not(a).to_vector<U32>() ==
        std::vector<U32>{0x0F0F0F0Fu, 0xEDCBA987u, 0u, 0xFFFFFFFFu});

  Array x = array<I32>({-1, 6, -8, 0});
  Array y = array<I32>({5, 3, 7, -1});
  CHECK(bitwise_and(x, y).to_vector<I32>() == std::vector<I32>{5, 2, 0, 0});
  CHECK(bitwise_or(x, y).to_vector<I32>() == std::vector<I32>{-1, 7, -1, -1});
  CHECK(bitwise_xor(x, y).to_vector<I32>() == std::vector<I32>{-6, 5, -1, -1});
  CHECK(bitwise_not(x).to_vector<I32>() == std::vector<I32>{0, -7, 7, -1});
  CHECK(bitwise_and(x, y).dtype() == i32);
}

TEST_CASE("bitwise ops on bool equal the logical ops") {
  Array a = array<bool>({true, true, false, false});
  Array b = array<bool>({true, false, true, false});
  CHECK(bitwise_and(a, b).dtype() == bool_);
  CHECK(bitwise_and(a, b).to_vector<bool>() == std::vector<bool>{1, 0, 0, 0});
  CHECK(bitwise_or(a, b).to_vector<bool>() == std::vector<bool>{1, 1, 1, 0});
  CHECK(bitwise_xor(a, b).to_vector<bool>() == std::vector<bool>{0, 1, 1, 0});
  CHECK(bitwise_not(a).to_vector<bool>() == std::vector<bool>{0, 0, 1, 1});
}

TEST_CASE("shifts: logical on the bit pattern, amounts outside [0, 32) give 0") {
  Array a = array<U32>({1u, 0x80000001u, 0xFFFFFFFFu, 7u, 7u, 7u});
  Array n = array<U32>({31u, 1u, 4u, 0u, 32u, 1000u});
  CHECK(shift_left(a, n).to_vector<U32>() ==
        std::vector<U32>{0x80000000u, 2u, 0xFFFFFFF0u, 7u, 0u, 0u});
  CHECK(shift_right_logical(a, n).to_vector<U32>() ==
        std::vector<U32>{0u, 0x40000000u, 0x0FFFFFFFu, 7u, 0u, 0u});

  Array x = array<I32>({-1, -8, 1, 5, 5});
  Array m = array<I32>({28, 1, 31, 32, -1});
  CHECK(shift_left(x, m).to_vector<I32>() ==
        std::vector<I32>{-268435456, -16, INT32_MIN, 0, 0});
  CHECK(shift_right_logical(x, m).to_vector<I32>() ==
        std::vector<I32>{15, 0x7FFFFFFC, 0, 0, 0});
}

TEST_CASE("bitwise ops broadcast and take scalar operands of the array's dtype") {
  Array a = array<U32>({0x12345678u, 0xFFFFFFFFu});
  CHECK(shift_left(a, 4).to_vector<U32>() ==
        std::vector<U32>{0x23456780u, 0xFFFFFFF0u});
  CHECK(shift_right_logical(a, 28u).to_vector<U32>() ==
        std::vector<U32>{1u, 15u});
  CHECK(shift_left(1u, array<U32>({0u, 3u})).to_vector<U32>() ==
        std::vector<U32>{1u, 8u});
  CHECK(bitwise_xor(a, 0xFFFFFFFFu).to_vector<U32>() ==
        std::vector<U32>{0xEDCBA987u, 0u});
  CHECK(bitwise_and(a, 0xFFu).to_vector<U32>() ==
        std::vector<U32>{0x78u, 0xFFu});
  CHECK(bitwise_or(a, 1).to_vector<U32>() ==
        std::vector<U32>{0x12345679u, 0xFFFFFFFFu});
  Array m = array<U32>(std::vector<U32>{1u, 2u, 4u, 8u, 16u, 32u}, {2, 3});
  Array col = array<U32>(std::vector<U32>{0u, 0xFFu}, {2, 1});
  CHECK(bitwise_or(m, col).to_vector<U32>() ==
        std::vector<U32>{1u, 2u, 4u, 0xFFu, 0xFFu, 0xFFu});
  // Long rows take the flat per-row path; amounts broadcast along a column.
  Array ones_ = full({3, 20}, 1.0, u32);
  Array amounts = reshape(array<U32>({1u, 2u, 40u}), {3, 1});
  std::vector<U32> want;
  for (U32 v : {2u, 4u, 0u}) want.insert(want.end(), 20, v);
  CHECK(shift_left(ones_, amounts).to_vector<U32>() == want);
}

TEST_CASE("bitwise ops reject floats and mixed dtypes, naming the op") {
  Array f = array<float>({1.0f, 2.0f});
  Array u = array<U32>({1u, 2u});
  Array i = array<I32>({1, 2});
  CHECK_THROWS_WITH_AS(
      bitwise_and(f, f),
      "[bitwise_and] requires an integer or bool dtype (i32, u32 or bool), got "
      "f32 for operands of shapes (2,) and (2,); reinterpret floats with "
      "bitcast(x, u32)",
      DTypeError);
  CHECK_THROWS_WITH_AS(
      bitwise_not(f),
      "[bitwise_not] requires an integer or bool dtype (i32, u32 or bool), got "
      "f32 for an operand of shape (2,); reinterpret floats with bitcast(x, u32)",
      DTypeError);
  CHECK_THROWS_WITH_AS(
      shift_left(array<bool>({true}), array<bool>({true})),
      "[shift_left] requires an integer dtype (i32 or u32), got bool for "
      "operands of shapes (1,) and (1,); reinterpret floats with bitcast(x, u32)",
      DTypeError);
  CHECK_THROWS_WITH_AS(
      shift_right_logical(u, i),
      "[shift_right_logical] dtype mismatch: u32 and i32 (kiln does not "
      "promote; use astype) for operands of shapes (2,) and (2,)",
      DTypeError);
  CHECK_THROWS_WITH_AS(shift_left(u, -1),
                       "[shift_left] scalar -1 cannot be represented in dtype u32",
                       DTypeError);
  CHECK_THROWS_AS(bitwise_xor(Array(), u), ValueError);
}

TEST_CASE("bitcast reinterprets the bits of f32, i32 and u32") {
  Array one = array<float>({1.0f, -2.0f, 0.0f});
  Array bits = bitcast(one, u32);
  CHECK(bits.dtype() == u32);
  CHECK(bits.shape() == Shape{3});
  CHECK(bits.to_vector<U32>() ==
        std::vector<U32>{0x3F800000u, 0xC0000000u, 0u});
  CHECK(bitcast(one, i32).to_vector<I32>() ==
        std::vector<I32>{0x3F800000, static_cast<I32>(0xC0000000u), 0});
  CHECK(bitcast(bits, f32).to_vector<float>() ==
        std::vector<float>{1.0f, -2.0f, 0.0f});
  CHECK(bitcast(array<I32>({-1}), u32).item<U32>() == 0xFFFFFFFFu);
  CHECK(bitcast(bits, u32).same(bits));  // same dtype: the array itself
  // (bits >> 9) | 0x3F800000 reinterpreted is in [1, 2): the uniform trick.
  Array u = bitcast(bitwise_or(shift_right_logical(array<U32>({0xFFFFFFFFu}), 9u),
                               0x3F800000u),
                    f32);
  CHECK(u.item<float>() == 2.0f - 0x1p-23f);
}

TEST_CASE("bitcast between dtypes of different sizes is an error") {
  CHECK_THROWS_WITH_AS(
      bitcast(array<bool>({true}), u32),
      "[bitcast] cannot reinterpret bool as u32 for an operand of shape (1,); "
      "bitcast converts between f32, i32 and u32 (same element size)",
      DTypeError);
  CHECK_THROWS_AS(bitcast(array<float>({1.0f}), bool_), DTypeError);
}
