// Embedding: an application that already has a Vulkan device gives it to kiln.
// kiln then owns none of the handles (it never destroys them) and creates only
// its own objects (buffers, pipelines, command pools) on that device.
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
  // unavailable; without 16-bit storage, f16; without shaderFloat64, f64.
  bool storage_buffer_8bit = false;
  bool storage_buffer_16bit = false;
  bool shader_float64 = false;
};

// Registers the application's device; returns the kiln Device that names it
// (vulkan:N, after the devices kiln enumerates itself). Calls from several threads
// must be serialised by the application if it also uses the queue itself.
Device use_external_device(const ExternalDevice& external);

}  // namespace kiln::vulkan
