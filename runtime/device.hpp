// Device: where an array's buffer lives. CPU now; Vulkan devices are added by the
// Vulkan backend. `KILN_DEVICE=cpu | vulkan | vulkan:N` picks the default.
#pragma once

#include <ostream>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

class Array;

struct Device {
  enum class Kind : unsigned char { kCpu, kVulkan };
  static constexpr std::size_t kKinds = 2;  // Kind's values (registries index by Kind)
  Kind kind = Kind::kCpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device vulkan(int index = 0) { return {Kind::kVulkan, index}; }
  friend bool operator==(const Device&, const Device&) = default;
  std::string to_string() const;  // "cpu", "vulkan:0"
};
std::ostream& operator<<(std::ostream& os, const Device& d);

// Parses "cpu", "vulkan", "vulkan:N"; throws DeviceError naming the bad text.
Device parse_device(const std::string& text);

// The device new arrays go to: set_default_device() if called, else KILN_DEVICE,
// else the best available device.
Device default_device();
void set_default_device(Device d);

// Waits until all work queued on `d` has finished (ops on a Vulkan device return
// before the device ran them; reading a value also waits).
void synchronize(Device d);

// What kiln knows about one device: identity, driver and the limits and features
// the Vulkan backend reads (zero/false for the CPU device).
struct DeviceInfo {
  Device device;
  std::string name;    // "llvmpipe (LLVM 15.0.6, 256 bits)", "cpu"
  std::string type;    // "cpu", "discrete-gpu", "integrated-gpu", "virtual-gpu", "software"
  std::string driver;  // driver name and version text
  std::uint32_t vendor_id = 0, device_id = 0, api_version = 0;
  std::uint64_t memory_bytes = 0;            // device-local heap
  std::uint64_t max_storage_buffer_range = 0;
  std::uint32_t max_workgroup_invocations = 0, max_shared_memory = 0;
  std::uint32_t max_workgroup_count[3] = {0, 0, 0};
  std::uint32_t subgroup_size = 0;
  bool f16 = false, f64 = false, bool_storage = false;
  bool bf16 = false;   // stored as 16-bit words, computed in f32 everywhere
  std::string error;   // why the device cannot be used, if it cannot
};
// Every device kiln can use: the CPU, then each Vulkan device (vulkan:N in order).
std::vector<DeviceInfo> devices();
std::ostream& operator<<(std::ostream& os, const DeviceInfo& d);

namespace detail {
// The first hardware Vulkan GPU, else the CPU: the first device a registered
// platform prefers.
Device best_device();

// What a backend layer tells the runtime about one kind of device. Each
// backend registers its own (backends/registry.cpp) when libkiln loads, so
// runtime/ lists, picks, waits for and uploads to devices without linking a
// backend; a build without one (the fuzz targets') has the CPU alone.
struct DevicePlatform {
  Device::Kind kind = Device::Kind::kCpu;
  // Appends this kind's devices, in index order.
  void (*append_devices)(std::vector<DeviceInfo>& out) = nullptr;
  // A device of this kind worth making the default (hardware), if any.
  std::optional<Device> (*preferred)() = nullptr;
  // Waits for the work queued on device `index` (null: nothing is queued).
  void (*synchronize)(int index) = nullptr;
  // A copy of the host array `host` on device `index`.
  Array (*from_host)(const Array& host, int index) = nullptr;
};
// The CPU's entry in devices() as far as the runtime knows it (what the CPU
// backend's append_devices starts from, adding its kernels to `driver`).
DeviceInfo cpu_device_info();
// Registers `p` for p.kind, replacing an earlier one; called from a static
// initialiser (the registry outlives every caller).
void register_platform(const DevicePlatform& p);
// The platform registered for `kind`, or null.
const DevicePlatform* platform(Device::Kind kind);
}  // namespace detail

}  // namespace kiln
