// VkResult -> kiln::Error, naming the call site.
#include "kiln/backends/vulkan/check.hpp"

#include <cstring>

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {

const char* result_name(VkResult r) {
  switch (r) {
#define KILN_VK_CASE(x) \
  case x:               \
    return #x;
    KILN_VK_CASE(VK_SUCCESS)
    KILN_VK_CASE(VK_NOT_READY)
    KILN_VK_CASE(VK_TIMEOUT)
    KILN_VK_CASE(VK_INCOMPLETE)
    KILN_VK_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    KILN_VK_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    KILN_VK_CASE(VK_ERROR_INITIALIZATION_FAILED)
    KILN_VK_CASE(VK_ERROR_DEVICE_LOST)
    KILN_VK_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    KILN_VK_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    KILN_VK_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    KILN_VK_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    KILN_VK_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    KILN_VK_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    KILN_VK_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    KILN_VK_CASE(VK_ERROR_FRAGMENTED_POOL)
    KILN_VK_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    KILN_VK_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    KILN_VK_CASE(VK_ERROR_FRAGMENTATION)
    KILN_VK_CASE(VK_ERROR_UNKNOWN)
    KILN_VK_CASE(VK_PIPELINE_COMPILE_REQUIRED)
#undef KILN_VK_CASE
    default:
      return "VkResult(unknown)";
  }
}

void check(VkResult r, const char* call, const char* file, int line) {
  if (r == VK_SUCCESS) return;
  const char* base = std::strrchr(file, '/');
  std::string where = detail::str_cat(base ? base + 1 : file, ":", line);
  std::string msg = detail::str_cat("[vulkan] ", call, " failed with ",
                                    result_name(r), " (", where, ")");
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
    throw OutOfMemoryError(msg);
  }
  if (r == VK_ERROR_DEVICE_LOST) {
    throw DeviceError(detail::str_cat(
        msg, ": the device was lost (driver reset or a kernel fault); "
             "arrays on it are gone"));
  }
  throw DeviceError(msg);
}

}  // namespace kiln::vk
