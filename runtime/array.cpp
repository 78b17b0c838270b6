// Array handle basics: construction checks, element access.
#include "kiln/runtime/array.hpp"

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace detail {

void check_data_size(std::size_t n, const Shape& shape) {
  for (auto d : shape) {
    if (d < 0) {
      throw ShapeError(detail::str_cat("[array] negative dimension in shape ",
                                    to_string(shape)));
    }
  }
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

}  // namespace detail

Array::Array(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer)
    : impl_(std::make_shared<ArrayImpl>(
          ArrayImpl{Aval{dtype, std::move(shape)}, std::move(buffer)})) {}

const ArrayImpl& Array::checked() const {
  if (!impl_) throw ValueError("[array] use of a null Array (None)");
  return *impl_;
}

Device Array::device() const {
  const auto& b = checked().buffer;
  return b ? b->device() : Device::cpu();
}

void Array::check_element_type(DType requested, const char* op) const {
  if (dtype() != requested) {
    throw DTypeError(detail::str_cat("[", op, "] requested element type ",
                                  name(requested), " from an array of dtype ",
                                  name(dtype())));
  }
}

const void* Array::host_bytes(const char* op) const {
  void* p = checked().buffer ? checked().buffer->host_data() : nullptr;
  if (p == nullptr && size() != 0) {
    throw DeviceError(detail::str_cat("[", op, "] array lives on ",
                                   device().to_string(),
                                   ", not on the host: use to_vector()"));
  }
  return p;
}

void Array::read_bytes(void* dst) const {
  if (size() != 0) checked().buffer->read(dst);
}

}  // namespace kiln
