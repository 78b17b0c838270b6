// kiln's exception hierarchy. Every message starts with the op or transform that
// raised it in brackets ("[matmul] ...") and names shapes, dtypes and tree paths.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Incompatible or invalid shapes, axes, sizes.
class ShapeError : public Error {
 public:
  using Error::Error;
};
// A dtype an op does not accept, or mixed dtypes.
class DTypeError : public Error {
 public:
  using Error::Error;
};
// Index out of range (take, slice bounds that cannot be clamped, item()).
class IndexError : public Error {
 public:
  using Error::Error;
};
// Pytree structures that do not match, bad paths, bad leaves.
class TreeError : public Error {
 public:
  using Error::Error;
};
// Arguments that are wrong for a reason other than shape/dtype/tree.
class ValueError : public Error {
 public:
  using Error::Error;
};
// Device selection, device loss, transfers.
class DeviceError : public Error {
 public:
  using Error::Error;
};
// debug::assert_max_traces: a function was traced more often than allowed.
class RetraceError : public Error {
 public:
  using Error::Error;
};
class OutOfMemoryError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

}  // namespace kiln
