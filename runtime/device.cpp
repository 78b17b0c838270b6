// Device naming, parsing and the process-wide default.
#include "kiln/runtime/device.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "absl/strings/numbers.h"
#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

std::string Device::to_string() const {
  return kind == Kind::kCpu ? std::string("cpu")
                            : detail::str_cat("vulkan:", index);
}

std::ostream& operator<<(std::ostream& os, const Device& d) {
  return os << d.to_string();
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "vulkan") return Device::vulkan(0);
  int index = 0;
  if (text.rfind("vulkan:", 0) == 0 &&
      absl::SimpleAtoi(text.substr(7), &index) && index >= 0) {
    return Device::vulkan(index);
  }
  throw DeviceError(detail::str_cat("[device] cannot parse device '", text,
                                 "': expected cpu, vulkan or vulkan:N"));
}

std::ostream& operator<<(std::ostream& os, const DeviceInfo& d) {
  os << d.device << ": " << d.name << " [" << d.type << "]";
  if (!d.driver.empty()) os << ", driver " << d.driver;
  if (d.memory_bytes > 0) os << ", " << (d.memory_bytes >> 20) << " MiB";
  if (!d.error.empty()) os << " (unusable: " << d.error << ")";
  return os;
}

namespace {
std::mutex g_mu;
std::optional<Device> g_default;
}  // namespace

Device default_device() {
  std::lock_guard lock(g_mu);
  if (!g_default) {
    if (const std::optional<std::string> env = detail::env::text("KILN_DEVICE")) {
      try {
        g_default = parse_device(*env);
      } catch (const DeviceError&) {
        throw DeviceError(detail::str_cat("[device] KILN_DEVICE=\"", *env,
                                          "\" is not a device: expected cpu, vulkan or vulkan:N "
                                          "(unset it to pick the best device)"));
      }
    } else {
      g_default = detail::best_device();
    }
  }
  return *g_default;
}

void set_default_device(Device d) {
  std::lock_guard lock(g_mu);
  g_default = d;
}

}  // namespace kiln
