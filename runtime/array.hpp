// Array: kiln's n-dimensional array handle. A cheap shared handle to immutable
// contents (copying an Array never copies data). A default-constructed Array is null:
// it is the pytree's None. Arrays are row-major and contiguous.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/runtime/buffer.hpp"
#include "kiln/runtime/device.hpp"
#include "kiln/runtime/dtype.hpp"
#include "kiln/runtime/shape.hpp"

namespace kiln {

class Array;
namespace detail {
void check_data_size(std::size_t n, const Shape& shape);
void check_item(const Array& a);
// Throws ValueError "[op] <which> was donated ..." for a donated array.
void check_not_donated(std::string_view op, const Array& a, std::string_view which);
// What reading an array's values needs (to_device, checkpoints): ValueError
// naming `op` for None, a tracer, a donated array.
void check_readable(const Array& a, const char* op);
// Gives a donated array its buffer back (a jitted call that threw before
// overwriting it): every handle sharing its impl reads its values again.
void restore_donated(const Array& a, std::shared_ptr<Buffer> buffer);
// Moves the buffer out of `a` (all handles sharing its impl see it donated) into
// a fresh array with the same aval and device. `a` must be concrete.
Array take_donated(const Array& a);
}  // namespace detail

// Abstract value: what is known of an array without its data.
struct Aval {
  DType dtype = DType::kF32;
  Shape shape;
  friend bool operator==(const Aval&, const Aval&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Aval& a) {
    return H::combine(std::move(h), a.dtype, a.shape);
  }
};
// "f32[2,3]", "i32[]": how programs and retrace explanations print an aval.
std::string to_string(const Aval& a);
std::ostream& operator<<(std::ostream& os, const Aval& a);

struct ArrayImpl {
  Aval aval;
  // Null for tracers. Mutable for one reason: donating an array to a jitted call
  // (filter_jit with std::move) takes the buffer out of every handle that shares
  // this impl, and marks it donated so that a later use is a clear error.
  mutable std::shared_ptr<Buffer> buffer;
  Device device;
  // Tracers (arrays standing for a value of a program being traced) carry the
  // id of their trace and their value in it; concrete arrays have trace_id 0.
  std::uint64_t trace_id = 0;
  std::int32_t value = -1;
  mutable bool donated = false;
  // Tracers only: 1 + the Prim of the binding that made it (0: a program input).
  // Fits in the padding; kept so that an escaped tracer's error can name its op.
  std::uint8_t origin = 0;
};

class Array {
 public:
  Array() = default;  // null: the tree's None
  Array(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer);
  // A tracer: value `value` of the trace `trace_id` (see dsl/trace.hpp).
  static Array tracer(Aval aval, Device device, std::uint64_t trace_id,
                      std::int32_t value, std::uint8_t origin = 0);

  // Host array copied from `data`; `shape` must have data.size() elements.
  template <class T>
  static Array from_data(std::span<const T> data, Shape shape);
  // Host array whose elements `write(std::span<T>)` stores in place: no
  // intermediate vector, no copy (a data loader's batch). The span's contents
  // are uninitialised until written; `shape` is checked first ("[array] ...").
  template <class T, class Write>
  static Array from_writer(Shape shape, Write&& write);

  bool is_null() const { return impl_ == nullptr; }
  DType dtype() const { return checked().aval.dtype; }
  const Shape& shape() const { return checked().aval.shape; }
  const Aval& aval() const { return checked().aval; }
  std::int64_t ndim() const { return static_cast<std::int64_t>(shape().size()); }
  std::int64_t size() const { return numel(shape()); }
  std::size_t nbytes() const { return size() * size_of(dtype()); }
  Device device() const { return checked().device; }
  const std::shared_ptr<Buffer>& buffer() const { return checked().buffer; }

  // Host pointer for arrays on the CPU; throws DeviceError for other devices and
  // DTypeError when T is not the array's element type.
  template <class T>
  const T* data() const;
  // Copies the contents to the host (waits for the device); T must match dtype.
  template <class T>
  std::vector<T> to_vector() const;
  // The single element of a size-1 array.
  template <class T>
  T item() const;

  // True after the array was donated to a jitted call (see filter_jit).
  bool is_donated() const { return impl_ != nullptr && impl_->donated; }
  // True when this handle (plus `extra_handles` known copies of it, and
  // `extra_buffer_handles` known holders of its buffer) is the only way to
  // reach its buffer (no other copy of the handle, no other array over the
  // same buffer): its owner may overwrite it.
  bool sole_owner(long extra_handles = 0, long extra_buffer_handles = 0) const {
    return impl_ != nullptr && impl_.use_count() == 1 + extra_handles &&
           impl_->buffer != nullptr && impl_->buffer.use_count() == 1 + extra_buffer_handles;
  }
  // True when both handles share the same contents (not elementwise ==).
  bool same(const Array& other) const { return impl_ == other.impl_; }
  const ArrayImpl* impl() const { return impl_.get(); }
  // Copies the contents' raw bytes (nbytes()) to dst, waiting for the device;
  // a tracer or a donated array throws first.
  void read_bytes(void* dst) const;

 private:
  const ArrayImpl& checked() const;
  void check_element_type(DType requested, const char* op) const;
  const void* host_bytes(const char* op) const;

  std::shared_ptr<const ArrayImpl> impl_;
};

// numpy-style printing: values (elided past 1000 elements), dtype and shape.
std::ostream& operator<<(std::ostream& os, const Array& a);
// Just the values as operator<< prints them: "[[1, 2],\n [3, 4]]", "2.5", "None".
std::string format_values(const Array& a);

// ---- template implementations ----
template <class T>
Array Array::from_data(std::span<const T> data, Shape shape) {
  detail::check_data_size(data.size(), shape);
  auto buf = HostBuffer::allocate(data.size() * sizeof(T));
  std::copy(data.begin(), data.end(), static_cast<T*>(buf->host_data()));
  return Array(dtype_of_v<T>, std::move(shape), std::move(buf));
}

template <class T, class Write>
Array Array::from_writer(Shape shape, Write&& write) {
  check_shape("array", shape, sizeof(T));
  const auto n = static_cast<std::size_t>(numel(shape));
  auto buf = HostBuffer::allocate(n * sizeof(T));
  std::forward<Write>(write)(std::span<T>(static_cast<T*>(buf->host_data()), n));
  return Array(dtype_of_v<T>, std::move(shape), std::move(buf));
}

// Copies `a` to `device` (returns `a` itself when it is already there).
// DeviceError when this build has no backend for `device`.
Array to_device(const Array& a, Device device);

template <class T>
const T* Array::data() const {
  check_element_type(dtype_of_v<T>, "data");
  return static_cast<const T*>(host_bytes("data"));
}

template <class T>
std::vector<T> Array::to_vector() const {
  check_element_type(dtype_of_v<T>, "to_vector");
  std::vector<T> out(static_cast<std::size_t>(size()));
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<unsigned char> bytes(out.size());
    read_bytes(bytes.data());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = bytes[i] != 0;
  } else {
    read_bytes(out.data());
  }
  return out;
}

template <class T>
T Array::item() const {
  detail::check_item(*this);
  return to_vector<T>()[0];
}

}  // namespace kiln
