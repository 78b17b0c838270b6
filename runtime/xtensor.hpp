// Conversions between kiln arrays and xtensor containers, for applications that
// already compute with xtensor. Not included by <kiln/kiln.hpp>, so code that
// does not convert does not pay xtensor's compile time:
//   #include <kiln/runtime/xtensor.hpp>
//   xt::xarray<float> x = kiln::to_xarray<float>(a);        // copies to the
//   host kiln::Array b = kiln::from_xexpression(xt::exp(x) + 1);  // evaluates,
//   copies
// Both copy: a kiln Array is immutable and may live on a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xexpression.hpp>
#include <xtensor/xnoalias.hpp>

#include "kiln/runtime/array.hpp"  // to_device
#include "kiln/runtime/device.hpp"  // default_device

namespace kiln {

// The contents of `a` (on any device) as a row-major xt::xarray<T>. T must be
// the C++ element type of a's dtype (bool, std::int32_t, std::uint32_t, float,
// double); otherwise DTypeError, as Array::to_vector.
template <class T>
xt::xarray<T> to_xarray(const Array& a) {
  const std::vector<T> values = a.to_vector<T>();
  std::vector<std::size_t> shape(a.shape().begin(), a.shape().end());
  xt::xarray<T> out(shape);
  std::copy(values.begin(), values.end(), out.begin());
  return out;
}

// Evaluates `e` into a new array on the default device (as kiln::array does).
// The dtype follows the expression's value_type, which must be one of kiln's
// element types.
template <class E>
Array from_xexpression(const xt::xexpression<E>& e) {
  using T = std::decay_t<typename E::value_type>;
  static_assert(std::is_same_v<T, bool> || std::is_same_v<T, std::int32_t> ||
                    std::is_same_v<T, std::uint32_t> ||
                    std::is_same_v<T, float> || std::is_same_v<T, double>,
                "from_xexpression: the value_type must be bool, std::int32_t, "
                "std::uint32_t, float or double (use xt::cast<T> first)");
  const E& expr = e.derived_cast();
  Shape shape(expr.shape().begin(), expr.shape().end());
  const auto n = static_cast<std::size_t>(numel(shape));
  auto buf = HostBuffer::allocate(n * sizeof(T));
  // Evaluate straight into the new buffer, row-major whatever e's layout.
  std::vector<std::size_t> xshape(shape.begin(), shape.end());
  auto dst = xt::adapt(static_cast<T*>(buf->host_data()), n, xt::no_ownership(),
                       xshape);
  xt::noalias(dst) = expr;
  return to_device(Array(dtype_of_v<T>, std::move(shape), std::move(buf)),
                   default_device());
}

}  // namespace kiln
