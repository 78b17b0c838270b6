// TEMPORARY: numpy-style printing is written next.
#include <ostream>

#include "kiln/runtime/array.hpp"
namespace kiln {
std::ostream& operator<<(std::ostream& os, const Array& a) {
  if (a.is_null()) return os << "Array(None)";
  return os << "Array(dtype=" << a.dtype() << ", shape=" << to_string(a.shape()) << ")";
}
}  // namespace kiln
