// The one checked wrapper every Vulkan call goes through. KILN_VK(vkFoo(...))
// turns a failing VkResult into a kiln::Error that names the call, the file and
// the line: out-of-memory results become OutOfMemoryError, everything else
// (VK_ERROR_DEVICE_LOST included) DeviceError. Nothing in the backend aborts.
#pragma once

#include <vulkan/vulkan.h>

namespace kiln::vk {

// Throws for any result other than VK_SUCCESS (and the non-error codes a caller
// names as acceptable by checking before calling this).
void check(VkResult result, const char* call, const char* file, int line);
const char* result_name(VkResult result);

}  // namespace kiln::vk

#define KILN_VK(call) ::kiln::vk::check((call), #call, __FILE__, __LINE__)
