// The fuzz targets link runtime/ without dsl/ and the backends (a fast clang
// build). The one symbol runtime/ takes from them is the default-device
// choice (backends/registry.cpp), which no reader calls: answer the CPU.
#include "kiln/runtime/device.hpp"

namespace kiln::detail {
Device best_device() { return Device::cpu(); }
}  // namespace kiln::detail
