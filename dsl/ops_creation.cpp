// Creation ops: full/zeros/ones/arange, host data to device, scalar operands.
#include <cmath>

#include "kiln/dsl/backend.hpp"
#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

// Throws when `value` is not exactly representable in an integer/bool dtype.
void check_representable(const char* op, double value, DType dtype) {
  if (is_inexact(dtype)) return;
  bool ok = std::isfinite(value) && std::trunc(value) == value;
  if (ok && dtype == DType::kBool) ok = value == 0 || value == 1;
  if (ok && dtype == DType::kU32) ok = value >= 0 && value <= 4294967295.0;
  if (ok && dtype == DType::kI32) ok = value >= -2147483648.0 && value <= 2147483647.0;
  if (!ok) {
    throw DTypeError(detail::str_cat("[", op, "] scalar ", value,
                                     " cannot be represented in dtype ",
                                     name(dtype)));
  }
}

}  // namespace

Array full(const Shape& shape, double value, DType dtype, Device device) {
  check_shape("full", shape, size_of(dtype));
  check_representable("full", value, dtype);
  return detail::bind<Prim::kFull>(FullParams{value, device}, {},
                                   Aval{dtype, shape});
}
Array full(const Shape& shape, double value, DType dtype) {
  return full(shape, value, dtype, default_device());
}
Array zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }
Array ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
Array zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}
Array ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}
Array full_like(const Array& a, double value) {
  return full(a.shape(), value, a.dtype(), a.device());
}
Array zeros_like(const Array& a) { return full_like(a, 0.0); }
Array ones_like(const Array& a) { return full_like(a, 1.0); }

Array arange(double stop, DType dtype) { return arange(0.0, stop, 1.0, dtype); }

Array arange(double start, double stop, double step, DType dtype) {
  return arange(start, stop, step, dtype, default_device());
}

Array arange(double start, double stop, double step, DType dtype, Device device) {
  if (step == 0 || !std::isfinite(step) || !std::isfinite(start) ||
      !std::isfinite(stop)) {
    throw ValueError(detail::str_cat("[arange] needs finite bounds and a non-zero step, got start=",
                                     start, " stop=", stop, " step=", step));
  }
  if (dtype == DType::kBool) {
    throw DTypeError("[arange] dtype bool is not numeric");
  }
  check_representable("arange", start, dtype);
  check_representable("arange", step, dtype);
  const double n = std::ceil((stop - start) / step);
  Shape shape{n > 0 ? static_cast<std::int64_t>(n) : 0};
  return detail::bind<Prim::kArange>(ArangeParams{start, step, device}, {},
                                     Aval{dtype, shape});
}

Array scalar_like(const Array& like, double value, const char* op) {
  detail::check_not_none(op, like, "array operand");
  check_representable(op, value, like.dtype());
  return full(Shape{}, value, like.dtype(), like.device());
}

}  // namespace kiln
