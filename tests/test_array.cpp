// Array handles as users see them: numpy-style printing and conversion to and
// from xtensor containers.
#include <doctest/doctest.h>

#include <cstdint>
#include <kiln/kiln.hpp>
#include <kiln/runtime/xtensor.hpp>
#include <limits>
#include <sstream>
#include <string>
#include <vector>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xoperation.hpp>

using namespace kiln;

namespace {

std::string repr(const Array& a) {
  std::ostringstream os;
  os << a;
  return os.str();
}

Array iota(std::int64_t n, const Shape& shape) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<std::int32_t>(i);
  return array(v, shape);
}

}  // namespace

// ---- printing ----

TEST_CASE("arrays print like numpy, with kiln's dtype and shape") {
  CHECK(repr(array(std::vector<float>{1, 2.5f, 3, 4, 5, 6}, Shape{2, 3})) ==
        "Array([[1, 2.5, 3],\n"
        "       [4, 5, 6]], dtype=f32, shape=(2, 3))");
  CHECK(repr(array<std::int32_t>({-1, 0, 7})) ==
        "Array([-1, 0, 7], dtype=i32, shape=(3,))");
  CHECK(repr(array<std::uint32_t>({4000000000u})) ==
        "Array([4000000000], dtype=u32, shape=(1,))");
}

TEST_CASE("0-d, bool, null and empty arrays print") {
  CHECK(repr(scalar<std::int32_t>(3)) == "Array(3, dtype=i32, shape=())");
  CHECK(repr(scalar(-0.5)) == "Array(-0.5, dtype=f64, shape=())");
  CHECK(repr(array(std::vector<bool>{true, false}, Shape{2})) ==
        "Array([true, false], dtype=bool, shape=(2,))");
  CHECK(repr(Array()) == "Array(None)");
  CHECK(repr(zeros({0, 3})) == "Array([], dtype=f32, shape=(0, 3))");
}

TEST_CASE("floats print as the shortest text that reads back exactly") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(repr(array<float>({0.1f, 1e-7f, 1e20f, -inf, inf,
                           std::numeric_limits<float>::quiet_NaN()})) ==
        "Array([0.1, 1e-07, 1e+20, -inf, inf, nan], dtype=f32, shape=(6,))");
  CHECK(repr(array<double>({0.1 + 0.2, 1.0 / 3})) ==
        "Array([0.30000000000000004, 0.3333333333333333], dtype=f64, "
        "shape=(2,))");
}

TEST_CASE("arrays of rank 3 separate blocks with a blank line") {
  CHECK(repr(iota(8, {2, 2, 2})) ==
        "Array([[[0, 1],\n"
        "        [2, 3]],\n"
        "\n"
        "       [[4, 5],\n"
        "        [6, 7]]], dtype=i32, shape=(2, 2, 2))");
}

TEST_CASE(
    "arrays of more than 1000 elements elide all but 3 items at each end") {
  CHECK(repr(iota(1001, {1001})) ==
        "Array([0, 1, 2, ..., 998, 999, 1000], dtype=i32, shape=(1001,))");
  CHECK(repr(iota(1600, {40, 40})) ==
        "Array([[0, 1, 2, ..., 37, 38, 39],\n"
        "       [40, 41, 42, ..., 77, 78, 79],\n"
        "       [80, 81, 82, ..., 117, 118, 119],\n"
        "       ...,\n"
        "       [1480, 1481, 1482, ..., 1517, 1518, 1519],\n"
        "       [1520, 1521, 1522, ..., 1557, 1558, 1559],\n"
        "       [1560, 1561, 1562, ..., 1597, 1598, 1599]], dtype=i32, "
        "shape=(40, 40))");
  // Axes short enough are printed whole even when the array is elided.
  const std::string tall = repr(iota(2002, {1001, 2}));
  CHECK(tall.find("[[0, 1],\n       [2, 3],\n       [4, 5],\n       ...,\n     "
                  "  [1996, 1997],") != std::string::npos);
  // 1000 elements are still printed in full.
  const std::string full = repr(iota(1000, {1000}));
  CHECK(full.find("...") == std::string::npos);
  CHECK(full.find("998, 999]") != std::string::npos);
}

// ---- xtensor conversions ----

TEST_CASE("to_xarray copies values and shape into an xt::xarray") {
  const Array a = array(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const xt::xarray<float> x = to_xarray<float>(a);
  CHECK(x.dimension() == 2);
  CHECK(x.shape()[0] == 2);
  CHECK(x.shape()[1] == 3);
  CHECK(x(1, 0) == 4.0f);
  CHECK(x(0, 2) == 3.0f);
  const xt::xarray<bool> b =
      to_xarray<bool>(array(std::vector<bool>{true, false}, Shape{2}));
  CHECK(b(0));
  CHECK_FALSE(b(1));
  CHECK(to_xarray<std::int32_t>(scalar<std::int32_t>(7)).dimension() == 0);
  CHECK_THROWS_AS(to_xarray<std::int32_t>(a), DTypeError);
}

TEST_CASE(
    "from_xexpression evaluates an expression into an array of its "
    "value_type") {
  const xt::xarray<double> x = {{1.0, 2.0}, {3.0, 4.0}};
  const Array a = from_xexpression(x * 2.0 + 1.0);
  CHECK(a.dtype() == f64);
  CHECK(a.shape() == Shape{2, 2});
  CHECK(a.to_vector<double>() == std::vector<double>{3, 5, 7, 9});
  CHECK(a.device() == default_device());
  const Array r = from_xexpression(xt::arange<std::int32_t>(5));
  CHECK(r.dtype() == i32);
  CHECK(r.to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{0, 1, 2, 3, 4});
  const xt::xarray<bool> mask = {true, false, true};
  CHECK(from_xexpression(mask).to_vector<bool>() ==
        std::vector<bool>{true, false, true});
  const xt::xarray<float> zero_d(2.5f);  // a 0-d container
  CHECK(from_xexpression(zero_d).shape() == Shape{});
  CHECK(from_xexpression(zero_d).item<float>() == 2.5f);
  const xt::xarray<float> empty(xt::xarray<float>::shape_type{0, 3});
  CHECK(from_xexpression(empty).shape() == Shape{0, 3});
}

TEST_CASE("from_xexpression reads column-major containers in logical order") {
  xt::xarray<std::uint32_t, xt::layout_type::column_major> cm = {{1, 2},
                                                                 {3, 4}};
  CHECK(from_xexpression(cm).to_vector<std::uint32_t>() ==
        std::vector<std::uint32_t>{1, 2, 3, 4});
}

TEST_CASE("xtensor round trip preserves values, shape and dtype") {
  const Array a =
      array(std::vector<float>{0.5f, -1, 2, 8, 0, 3}, Shape{3, 1, 2});
  const Array back = from_xexpression(to_xarray<float>(a));
  CHECK(back.dtype() == f32);
  CHECK(back.shape() == a.shape());
  CHECK(back.to_vector<float>() == a.to_vector<float>());
}

TEST_CASE("freed host buffers are reused by size, and the cache can be emptied") {
  clear_host_cache();
  CHECK(host_cache_bytes() == 0);
  const void* first = nullptr;
  {
    Array a = zeros({1000});  // 4000 bytes, 64-byte rounded: 4032
    first = a.data<float>();
  }
  CHECK(host_cache_bytes() == 4032);
  Array b = ones({1000});
  CHECK(b.data<float>() == first);  // the same block, handed out again
  CHECK(host_cache_bytes() == 0);
  CHECK(b.to_vector<float>() == std::vector<float>(1000, 1.0f));
  Array c = ones({10});
  c = Array();
  CHECK(host_cache_bytes() == 64);
  clear_host_cache();
  CHECK(host_cache_bytes() == 0);
}

TEST_CASE("array(shape, write) builds an array in place, with no copy on the CPU") {
  const void* seen = nullptr;
  const Array a = Array::from_writer<std::int32_t>({2, 3}, [&](std::span<std::int32_t> out) {
    CHECK(out.size() == 6);
    seen = out.data();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::int32_t>(10 * i);
  });
  CHECK(a.dtype() == i32);
  CHECK(a.shape() == Shape{2, 3});
  CHECK(a.data<std::int32_t>() == seen);  // the buffer written is the array's
  CHECK(a.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 10, 20, 30, 40, 50});

  // The DSL form lands on the default device, like array(vector, shape).
  const Array b = array<float>({3}, [](std::span<float> out) {
    out[0] = 1.5f;
    out[1] = -2.0f;
    out[2] = 0.25f;
  });
  CHECK(b.device() == default_device());
  CHECK(b.to_vector<float>() == std::vector<float>{1.5f, -2.0f, 0.25f});
  const Array empty = array<float>({0, 4}, [](std::span<float> out) { CHECK(out.empty()); });
  CHECK(empty.shape() == Shape{0, 4});

  // A bad shape is refused before the writer runs; the writer's exception
  // reaches the caller.
  bool ran = false;
  CHECK_THROWS_WITH_AS(array<float>({2, -1}, [&](std::span<float>) { ran = true; }),
                       doctest::Contains("[array]"), ShapeError);
  CHECK_FALSE(ran);
  CHECK_THROWS_WITH(array<float>({4}, [](std::span<float>) { throw std::runtime_error("no data"); }),
                    "no data");
}

TEST_CASE("an Array over a missing or too small buffer is refused when it is made") {
  CHECK_THROWS_WITH_AS(Array(DType::kF32, Shape{1000}, nullptr),
                       "[array] a f32(1000,) array needs a buffer of 4000 bytes, got none (a null "
                       "buffer)",
                       ValueError);
  CHECK_THROWS_WITH_AS(Array(DType::kF32, Shape{1000}, HostBuffer::allocate(4)),
                       "[array] a f32(1000,) array needs a buffer of 4000 bytes, got 4 bytes",
                       ValueError);
  // An empty array needs no buffer; a larger buffer is fine.
  CHECK(Array(DType::kF32, Shape{0}, nullptr).size() == 0);
  CHECK(Array(DType::kF32, Shape{2}, HostBuffer::allocate(64)).size() == 2);
}
