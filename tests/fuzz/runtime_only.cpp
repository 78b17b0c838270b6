// The fuzz targets link runtime/ without dsl/ and the backends (a fast clang
// build). The symbols runtime/ takes from them:
//   - the default-device choice (backends/registry.cpp), which no reader
//     calls: answer the CPU;
//   - to_device (dsl/ops_creation.cpp), with which load_checkpoint moves each
//     loaded array to its template's device: the targets' arrays are all on
//     the CPU, where it is the identity; another device is refused.
#include "kiln/runtime/array.hpp"
#include "kiln/runtime/device.hpp"
#include "kiln/runtime/error.hpp"

namespace kiln {
namespace detail {
Device best_device() { return Device::cpu(); }
}  // namespace detail

Array to_device(const Array& a, Device device) {
  if (a.device() == device) return a;
  throw DeviceError("[to_device] the fuzz build has the CPU only");
}
}  // namespace kiln
