// numpy-style printing of arrays: nested brackets with rows aligned under the
// first,
// `...` in place of all but 3 leading and 3 trailing items per axis once an
// array has more than 1000 elements, then kiln's dtype and shape:
//   Array([[1, 2.5, 3],
//          [4, 5, 6]], dtype=f32, shape=(2, 3))
// Floats print as the shortest text that reads back as the same value (0.1, not
// 0.100000001), bools as true/false. The contents are read through the buffer,
// so this works for arrays on any device.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/runtime/half.hpp"
#include "kiln/runtime/array.hpp"

namespace kiln {
namespace {

constexpr std::int64_t kThreshold = 1000;  // numpy's print threshold
constexpr std::int64_t kEdgeItems = 3;     // numpy's edgeitems
constexpr std::size_t kPrefix = 6;         // strlen("Array(")

template <class T>
std::string format_value(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(v)) return "nan";
      if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
    }
    char buf[64];
    const auto result =
        std::to_chars(buf, buf + sizeof(buf), v);  // shortest round trip
    return std::string(buf, result.ptr);
  }
}

// Prints nested brackets; cell(i) is the text of the i-th element in row-major
// order (only the printed elements are formatted).
template <class Cell>
class Printer {
 public:
  Printer(const Shape& shape, Cell cell, bool elide)
      : shape_(shape),
        strides_(row_major_strides(shape)),
        cell_(cell),
        elide_(elide) {}

  void print(std::ostream& os, std::size_t axis, std::int64_t offset) const {
    if (axis == shape_.size()) {
      os << cell_(static_cast<std::size_t>(offset));
      return;
    }
    // Between items: ", " in the last axis, else a line break (one blank line
    // per further axis, as numpy) and the indent of this axis' items.
    const std::size_t further = shape_.size() - axis - 1;
    const std::string separator =
        further == 0 ? std::string(", ")
                     : "," + std::string(further, '\n') +
                           std::string(kPrefix + axis + 1, ' ');
    const std::int64_t n = shape_[axis];
    const bool cut = elide_ && n > 2 * kEdgeItems;
    os << '[';
    for (std::int64_t i = 0; i < n; ++i) {
      if (cut && i == kEdgeItems) {
        os << "..." << separator;
        i = n - kEdgeItems;
      }
      print(os, axis + 1, offset + i * strides_[axis]);
      if (i + 1 < n) os << separator;
    }
    os << ']';
  }

 private:
  const Shape& shape_;
  Shape strides_;
  Cell cell_;
  bool elide_;
};

template <class T>
void print_values(std::ostream& os, const Shape& shape,
                  const std::vector<T>& values) {
  const auto cell = [&values](std::size_t i) {
    return format_value<T>(values[i]);
  };
  Printer<decltype(cell)>(shape, cell, numel(shape) > kThreshold)
      .print(os, 0, 0);
}

}  // namespace

std::string format_values(const Array& a) {
  if (a.is_null()) return "None";
  detail::check_not_donated("print", a, "the array");
  std::ostringstream os;
  if (a.size() == 0) {
    os << "[]";
  } else if (is_16bit_float(a.dtype())) {
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(a.size()));
    a.read_bytes(bits.data());  // checks it is concrete and not donated
    std::vector<float> values(bits.size());
    const bool brain = a.dtype() == DType::kBF16;
    for (std::size_t i = 0; i < bits.size(); ++i)
      values[i] = brain ? bf16_to_float(bits[i]) : half_to_float(bits[i]);
    print_values(os, a.shape(), values);
  } else {
    visit_dtype(a.dtype(), [&](auto zero) {
      print_values(os, a.shape(), a.to_vector<decltype(zero)>());
    });
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Array& a) {
  if (a.is_null()) return os << "Array(None)";
  // Formatted before anything is written: an array that cannot be read (a
  // tracer, a donated array) throws with the stream untouched.
  const std::string values = format_values(a);
  return os << "Array(" << values << ", dtype=" << a.dtype()
            << ", shape=" << to_string(a.shape()) << ")";
}

}  // namespace kiln
