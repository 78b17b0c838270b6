// Device: where an array's buffer lives. CPU now; Vulkan devices are added by the
// Vulkan backend. `KILN_DEVICE=cpu | vulkan | vulkan:N` picks the default.
#pragma once

#include <ostream>
#include <string>

namespace kiln {

struct Device {
  enum class Kind : unsigned char { kCpu, kVulkan };
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

}  // namespace kiln
