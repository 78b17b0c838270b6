// Embedding: an application that already has a Vulkan device gives it to kiln.
// kiln then owns none of the handles (it never destroys them) and creates only
// its own objects (buffers, pipelines, command pools) on that device.
//
// Lifetime: the application's instance, device and queue must outlive kiln's use
// of them. To destroy its VkDevice, the application first drops every kiln array
// on it (and every jitted function whose compiled programs hold one), then calls
// release_external_device, which destroys kiln's objects on the device; only then
// may it call vkDestroyDevice. examples/embed shows the whole sequence.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>

#include "kiln/runtime/device.hpp"

namespace kiln::vulkan {

struct ExternalDevice {
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical_device = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  std::uint32_t queue_family = 0;  // must support compute
  std::uint32_t queue_index = 0;
  // The features the application enabled on `device` (kiln cannot query what was
  // enabled, only what is supported). Without 8-bit storage, bool arrays are
  // unavailable; without 16-bit storage, f16 and bf16; without shaderFloat64, f64;
  // without bufferDeviceAddress, arrays larger than maxStorageBufferRange.
  bool storage_buffer_8bit = false;
  bool storage_buffer_16bit = false;
  bool shader_float64 = false;
  bool buffer_device_address = false;
};

// Registers the application's device; returns the kiln Device that names it
// (vulkan:N, after the devices kiln enumerates itself). Calls from several threads
// must be serialised by the application if it also uses the queue itself.
Device use_external_device(const ExternalDevice& external);

// Waits for kiln's work on `device` (a device use_external_device returned) and
// destroys every object kiln created on it; the application may then destroy its
// VkDevice. Throws DeviceError while arrays on the device are alive (nothing is
// released then), or for a device kiln enumerated itself. The device's number is
// not reused: using it afterwards is a DeviceError.
void release_external_device(Device device);

}  // namespace kiln::vulkan
