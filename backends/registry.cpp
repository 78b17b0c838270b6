// The CPU and Vulkan backends register themselves when libkiln loads: with
// dsl/ (backend_for) and with runtime/ (listing, default choice, synchronize,
// upload), which call through those registries and link no backend. The Vulkan
// half is backends/vulkan/register.cpp, built with -Dvulkan=enabled only.
#include <cblas.h>

#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/gemm.hpp"
#include "kiln/backends/cpu/simd.hpp"
#include "kiln/dsl/backend.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
#if KILN_HAVE_VULKAN
namespace vk {
void register_vulkan();  // backends/vulkan/register.cpp
}  // namespace vk
#endif
namespace {

Backend& cpu_backend_at(int) {
  static cpu::CpuBackend backend;
  return backend;
}

void list_cpu(std::vector<DeviceInfo>& out) {
  DeviceInfo cpu = detail::cpu_device_info();
  // Which code runs: the SIMD level of the elementwise kernels, what runs f32
  // GEMMs, and OpenBLAS's build and the kernels it picked for this CPU (f64
  // GEMMs); bench tables print this.
  std::string gemm;
  try {
    gemm = cpu::gemm_name();
  } catch (const Error& e) {
    gemm = e.what();  // a bad KILN_GEMM: the first matmul raises it
  }
  cpu.driver = detail::str_cat("kiln SIMD ", cpu::isa_name(cpu::active_isa()), "; f32 GEMM ",
                               gemm, "; ", openblas_get_config(), " (", openblas_get_corename(),
                               " kernels)");
  out.push_back(cpu);
}

bool register_builtin() {
  register_backend(Device::Kind::kCpu, &cpu_backend_at);
  detail::DevicePlatform cpu;
  cpu.kind = Device::Kind::kCpu;
  cpu.append_devices = &list_cpu;
  detail::register_platform(cpu);
#if KILN_HAVE_VULKAN
  vk::register_vulkan();
#endif
  return true;
}

}  // namespace
}  // namespace kiln

// Registers the backends when libkiln loads. kiln.hpp names it, so that a
// program linking libkiln statically links this file too: nothing else refers
// to it (the layers below call through the registries).
extern "C" const bool kiln_backends_registered = kiln::register_builtin();
