// Device naming, parsing, the process-wide default, and the registry of
// device platforms the backends fill.
#include "kiln/runtime/device.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "absl/strings/numbers.h"
#include "kiln/runtime/array.hpp"
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

// Filled by static initialisers when libkiln loads, read afterwards: no lock.
std::array<std::optional<detail::DevicePlatform>, Device::kKinds>& platforms() {
  static std::array<std::optional<detail::DevicePlatform>, Device::kKinds> all;
  return all;
}
}  // namespace

namespace detail {
DeviceInfo cpu_device_info() {
  DeviceInfo info;
  info.device = Device::cpu();
  info.name = info.type = "cpu";
  info.f16 = info.bf16 = info.f64 = info.bool_storage = true;
  return info;
}

void register_platform(const DevicePlatform& p) {
  platforms()[static_cast<std::size_t>(p.kind)] = p;
}

const DevicePlatform* platform(Device::Kind kind) {
  const auto& slot = platforms()[static_cast<std::size_t>(kind)];
  return slot ? &*slot : nullptr;
}

Device best_device() {
  for (const auto& p : platforms()) {
    if (!p || !p->preferred) continue;
    if (const std::optional<Device> d = p->preferred()) return *d;
  }
  return Device::cpu();
}
}  // namespace detail

void synchronize(Device d) {
  const detail::DevicePlatform* p = detail::platform(d.kind);
  if (p != nullptr && p->synchronize != nullptr) p->synchronize(d.index);
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  if (const detail::DevicePlatform* cpu = detail::platform(Device::Kind::kCpu);
      cpu != nullptr && cpu->append_devices != nullptr) {
    cpu->append_devices(out);
  } else {  // no CPU backend linked (the fuzz targets): what the runtime knows
    out.push_back(detail::cpu_device_info());
  }
  for (const auto& p : platforms()) {
    if (p && p->kind != Device::Kind::kCpu && p->append_devices) p->append_devices(out);
  }
  return out;
}

Array to_device(const Array& a, Device device) {
  detail::check_readable(a, "to_device");
  if (a.device() == device) return a;
  if (device == Device::cpu()) {
    auto buf = HostBuffer::allocate(a.nbytes());
    a.buffer()->read(buf->host_data());
    return Array(a.dtype(), a.shape(), std::move(buf));
  }
  const detail::DevicePlatform* p = detail::platform(device.kind);
  if (p == nullptr || p->from_host == nullptr) {
    throw DeviceError(detail::str_cat("[to_device] this build of kiln has no backend for ",
                                      device.to_string()));
  }
  return p->from_host(to_device(a, Device::cpu()), device.index);
}

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
