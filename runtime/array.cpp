// Array handle basics: construction checks, element access.
#include "kiln/runtime/array.hpp"

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

std::string to_string(const Aval& a) {
  return detail::str_cat(name(a.dtype), "[", detail::join(a.shape, ","), "]");
}
std::ostream& operator<<(std::ostream& os, const Aval& a) { return os << to_string(a); }
namespace detail {

void check_data_size(std::size_t n, const Shape& shape) {
  check_shape("array", shape, 1);
  if (static_cast<std::int64_t>(n) != numel(shape)) {
    throw ShapeError(detail::str_cat("[array] ", n, " values cannot fill shape ",
                                  to_string(shape), " (", numel(shape),
                                  " elements)"));
  }
}

void check_item(const Array& a) {
  if (a.size() != 1) {
    throw ShapeError(detail::str_cat("[item] needs an array with one element, got shape ",
                                  to_string(a.shape())));
  }
}

void check_not_donated(std::string_view op, const Array& a, std::string_view which) {
  if (a.is_donated()) {
    throw ValueError(detail::str_cat(
        "[", op, "] ", which, " (", name(a.dtype()), to_string(a.shape()),
        ") was donated to a jitted call (passed with std::move) and no longer holds "
        "data; use the arrays that call returned"));
  }
}

void restore_donated(const Array& a, std::shared_ptr<Buffer> buffer) {
  const ArrayImpl& impl = *a.impl();
  impl.buffer = std::move(buffer);
  impl.donated = false;
}

Array take_donated(const Array& a) {
  const ArrayImpl& impl = *a.impl();
  Array out(impl.aval.dtype, impl.aval.shape, std::move(impl.buffer));
  impl.buffer = nullptr;
  impl.donated = true;
  return out;
}

}  // namespace detail

Array::Array(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer) {
  check_shape("array", shape, size_of(dtype));
  const std::size_t need = static_cast<std::size_t>(numel(shape)) * size_of(dtype);
  if (need > 0 && (buffer == nullptr || buffer->nbytes() < need)) {
    throw ValueError(detail::str_cat(
        "[array] a ", name(dtype), to_string(shape), " array needs a buffer of ", need,
        " bytes, got ", buffer == nullptr ? std::string("none (a null buffer)")
                                          : detail::str_cat(buffer->nbytes(), " bytes")));
  }
  const Device device = buffer ? buffer->device() : Device::cpu();
  impl_ = std::make_shared<ArrayImpl>(
      ArrayImpl{Aval{dtype, std::move(shape)}, std::move(buffer), device});
}

Array Array::tracer(Aval aval, Device device, std::uint64_t trace_id,
                    std::int32_t value, std::uint8_t origin) {
  Array a;
  a.impl_ = std::make_shared<ArrayImpl>(
      ArrayImpl{std::move(aval), nullptr, device, trace_id, value, false, origin});
  return a;
}

namespace {
void check_concrete(const ArrayImpl& impl, const char* op) {
  if (impl.trace_id != 0) {
    throw ValueError(detail::str_cat(
        "[", op, "] cannot read a traced array (", name(impl.aval.dtype),
        to_string(impl.aval.shape),
        ") inside grad/filter_jit: its value is not known while tracing; "
        "return it from the traced function instead"));
  }
}
}  // namespace

const ArrayImpl& Array::checked() const {
  if (!impl_) {
    throw ValueError(
        "[array] use of a null Array (None): an Array that was never set, or a field of a "
        "struct that its KILN_MODULE(...) registration leaves out (grad, filter_jit and "
        "unflatten rebuild registered fields only; the rest are default-constructed)");
  }
  return *impl_;
}

void Array::check_element_type(DType requested, const char* op) const {
  if (dtype() != requested) {
    throw DTypeError(detail::str_cat("[", op, "] requested element type ",
                                  name(requested), " from an array of dtype ",
                                  name(dtype())));
  }
}

namespace detail {
void check_readable(const Array& a, const char* op) {
  if (a.is_null()) {
    throw ValueError(str_cat("[", op, "] got a null Array (None)"));
  }
  check_concrete(*a.impl(), op);
  check_not_donated(op, a, "the array");
}
}  // namespace detail

const void* Array::host_bytes(const char* op) const {
  check_concrete(checked(), op);
  detail::check_not_donated(op, *this, "the array");
  void* p = checked().buffer ? checked().buffer->host_data() : nullptr;
  if (p == nullptr && size() != 0) {
    throw DeviceError(detail::str_cat("[", op, "] array lives on ",
                                   device().to_string(),
                                   ", not on the host: use to_vector()"));
  }
  return p;
}

void Array::read_bytes(void* dst) const {
  check_concrete(checked(), "to_vector");
  detail::check_not_donated("to_vector", *this, "the array");
  if (size() != 0) checked().buffer->read(dst);
}

}  // namespace kiln
