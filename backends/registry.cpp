// Maps a Device to the backend that runs it.
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/dsl/backend.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

Backend& backend_for(Device d) {
  if (d.kind == Device::Kind::kCpu) {
    static cpu::CpuBackend cpu_backend;
    return cpu_backend;
  }
  throw DeviceError(detail::str_cat("[device] ", d.to_string(),
                                 " is not available in this build of kiln "
                                 "(the Vulkan backend is not built yet); use cpu"));
}

}  // namespace kiln
