// The Vulkan backend's registration: with dsl/ (backend_for) and with runtime/
// (listing, default choice, synchronize, upload). backends/registry.cpp calls
// register_vulkan() when libkiln is built with Vulkan (-Dvulkan=enabled).
#include <vulkan/vulkan.h>

#include <optional>
#include <string>
#include <vector>

#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/stream.hpp"
#include "kiln/backends/vulkan/vulkan_backend.hpp"
#include "kiln/dsl/backend.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "software";
    default: return "other";
  }
}

bool is_hardware(VkPhysicalDeviceType t) {
  return t == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU ||
         t == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
         t == VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU;
}

Backend& vulkan_backend_at(int index) { return backend(index); }

void sync_vulkan(int index) { Context::get(index).stream().synchronize(); }

Array upload_to_vulkan(const Array& host, int index) {
  return backend(index).from_host(host);
}

void list_vulkan(std::vector<DeviceInfo>& out) {
  std::vector<VkPhysicalDevice> phys;
  try {
    phys = physical_devices();
  } catch (const Error&) {
    return;  // no Vulkan loader or driver: the CPU only
  }
  for (std::size_t i = 0; i < phys.size(); ++i) {
    DeviceInfo info;
    info.device = Device::vulkan(static_cast<int>(i));
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(phys[i], &p);
    info.name = p.deviceName;
    info.type = type_name(p.deviceType);
    info.vendor_id = p.vendorID;
    info.device_id = p.deviceID;
    info.api_version = p.apiVersion;
    try {
      Context& ctx = Context::get(static_cast<int>(i));
      const auto& caps = ctx.caps();
      VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
      VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
      p2.pNext = &drv;
      vkGetPhysicalDeviceProperties2(phys[i], &p2);
      info.driver = detail::str_cat(drv.driverName, " ", drv.driverInfo);
      info.memory_bytes = ctx.allocator_heap_size();
      info.max_storage_buffer_range = caps.max_storage_buffer_range;
      info.max_workgroup_invocations = caps.max_invocations;
      info.max_shared_memory = caps.max_shared_memory;
      for (int k = 0; k < 3; ++k) info.max_workgroup_count[k] = caps.max_group_count[k];
      info.subgroup_size = caps.subgroup_size;
      info.f16 = caps.storage_16bit;
      info.bf16 = caps.bf16;
      info.f64 = caps.float64;
      info.bool_storage = caps.storage_8bit;
    } catch (const Error& e) {
      info.error = e.what();
    }
    out.push_back(std::move(info));
  }
}

// The first hardware Vulkan GPU (1.2 or newer).
std::optional<Device> prefer_vulkan() {
  try {
    const auto phys = physical_devices();
    for (std::size_t i = 0; i < phys.size(); ++i) {
      VkPhysicalDeviceProperties p;
      vkGetPhysicalDeviceProperties(phys[i], &p);
      if (is_hardware(p.deviceType) && VK_API_VERSION_MINOR(p.apiVersion) >= 2) {
        return Device::vulkan(static_cast<int>(i));
      }
    }
  } catch (const Error&) {
  }
  return std::nullopt;
}

}  // namespace

void register_vulkan() {
  register_backend(Device::Kind::kVulkan, &vulkan_backend_at);
  detail::DevicePlatform vulkan;
  vulkan.kind = Device::Kind::kVulkan;
  vulkan.append_devices = &list_vulkan;
  vulkan.preferred = &prefer_vulkan;
  vulkan.synchronize = &sync_vulkan;
  vulkan.from_host = &upload_to_vulkan;
  detail::register_platform(vulkan);
}

}  // namespace kiln::vk
