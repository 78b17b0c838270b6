// Instance and device creation, capability discovery, the quirk table and the
// validation-message sink.
#include "kiln/backends/vulkan/context.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "kiln/backends/vulkan/check.hpp"
#include "kiln/backends/vulkan/external.hpp"
#include "kiln/backends/vulkan/memory.hpp"
#include "kiln/backends/vulkan/pipeline.hpp"
#include "kiln/backends/vulkan/stream.hpp"
#include "kiln/backends/vulkan/vulkan_backend.hpp"
#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {

bool env_flag(const char* name) { return detail::env::flag(name).value_or(false); }

std::mutex g_messages_mu;
std::vector<std::string> g_messages;

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity,
    VkDebugUtilsMessageTypeFlagsEXT, const VkDebugUtilsMessengerCallbackDataEXT* data,
    void*) {
  if (severity < VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) return VK_FALSE;
  std::string text = data && data->pMessage ? data->pMessage : "(no text)";
  std::cerr << "kiln: vulkan validation: " << text << "\n";
  std::lock_guard lock(g_messages_mu);
  g_messages.push_back(std::move(text));
  return VK_FALSE;
}

bool has_layer(const char* name) {
  std::uint32_t n = 0;
  KILN_VK(vkEnumerateInstanceLayerProperties(&n, nullptr));
  std::vector<VkLayerProperties> layers(n);
  KILN_VK(vkEnumerateInstanceLayerProperties(&n, layers.data()));
  for (const auto& l : layers) {
    if (std::strcmp(l.layerName, name) == 0) return true;
  }
  return false;
}

struct InstanceHolder {
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  bool validation = false;

  InstanceHolder() {
    validation = env_flag("KILN_VALIDATION");
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "kiln";
    app.pEngineName = "kiln";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    info.pApplicationInfo = &app;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkValidationFeatureEnableEXT enables[] = {
        VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
    VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
    features.enabledValidationFeatureCount = 1;
    features.pEnabledValidationFeatures = enables;
    VkDebugUtilsMessengerCreateInfoEXT msg{
        VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    msg.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    msg.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
    msg.pfnUserCallback = on_message;
    if (validation) {
      if (!has_layer(layer)) {
        throw DeviceError(
            "[vulkan] KILN_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not "
            "installed (Debian: apt-get install vulkan-validationlayers)");
      }
      info.enabledLayerCount = 1;
      info.ppEnabledLayerNames = &layer;
      info.enabledExtensionCount = 1;
      info.ppEnabledExtensionNames = &ext;
      features.pNext = &msg;  // also catches messages from vkCreateInstance
      info.pNext = &features;
    }
    const VkResult made = vkCreateInstance(&info, nullptr, &instance);
    if (made == VK_ERROR_INCOMPATIBLE_DRIVER) {
      throw DeviceError(
          "[vulkan] no Vulkan driver (ICD) is installed, or none supports Vulkan 1.2: the "
          "loader found nothing to run on (Debian: apt-get install mesa-vulkan-drivers for "
          "lavapipe, the CPU's Vulkan device; VK_ICD_FILENAMES / VK_DRIVER_FILES name a "
          "driver's .json); the CPU backend (KILN_DEVICE=cpu) needs none");
    }
    KILN_VK(made);
    if (validation) {
      auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
      if (create) KILN_VK(create(instance, &msg, nullptr, &messenger));
    }
  }
  // The instance lives as long as the process: arrays held in static objects
  // may be destroyed after main returns, and they need the device.
};

std::atomic<bool> g_forked{false};
pid_t g_instance_pid = 0;

InstanceHolder& holder() {
  static auto* h = [] {
    auto* made = new InstanceHolder();
    g_instance_pid = ::getpid();
    ::pthread_atfork(nullptr, nullptr, [] { g_forked.store(true, std::memory_order_relaxed); });
    return made;
  }();
  check_not_forked();
  return *h;
}

// Driver quirks by VkDriverId. Entries name the behaviour, not the vendor.
void apply_driver_quirks(VkDriverId driver, Quirks& q) {
  if (driver == VK_DRIVER_ID_MESA_LLVMPIPE) {
    // lavapipe compiles at first dispatch; its VkPipelineCache data is a header.
    q.pipeline_cache_header_only = true;
    q.max_loop_iterations = 65535;
  }
}

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<Context>> contexts;  // by index; null until used
  struct External {
    vulkan::ExternalDevice device;
    bool released = false;  // release_external_device: its number is not reused
  };
  std::vector<External> externals;
};
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

}  // namespace

VkInstance instance() { return holder().instance; }

void check_not_forked() {
  if (g_forked.load(std::memory_order_relaxed)) {
    throw DeviceError(detail::str_cat(
        "[vulkan] this process was fork()ed from process ", g_instance_pid,
        " after that process had initialised Vulkan: Vulkan objects cannot be used across "
        "fork (the parent's device, queues and arrays are not this process's). Use Vulkan "
        "only in processes that initialise it themselves: fork before the parent's first "
        "Vulkan use, or exec a new program; the CPU device works in the child"));
  }
}
bool validation_enabled() { return holder().validation; }

std::vector<std::string> take_validation_messages() {
  std::lock_guard lock(g_messages_mu);
  return std::exchange(g_messages, {});
}

std::vector<VkPhysicalDevice> physical_devices() {
  std::uint32_t n = 0;
  KILN_VK(vkEnumeratePhysicalDevices(instance(), &n, nullptr));
  std::vector<VkPhysicalDevice> out(n);
  KILN_VK(vkEnumeratePhysicalDevices(instance(), &n, out.data()));
  out.resize(n);
  std::lock_guard lock(registry().mu);
  for (const auto& e : registry().externals) out.push_back(e.device.physical_device);
  return out;
}

struct ContextFactory {
  static std::unique_ptr<Context> create(int index, VkPhysicalDevice phys,
                                         const vulkan::ExternalDevice* external) {
    std::unique_ptr<Context> c(new Context());
    c->index_ = index;
    c->physical_ = phys;
    vkGetPhysicalDeviceProperties(phys, &c->props_);
    vkGetPhysicalDeviceMemoryProperties(phys, &c->memory_);
    if (VK_API_VERSION_MINOR(c->props_.apiVersion) < 2 &&
        VK_API_VERSION_MAJOR(c->props_.apiVersion) == 1) {
      throw DeviceError(detail::str_cat(
          "[vulkan] ", c->props_.deviceName, " supports Vulkan ",
          VK_API_VERSION_MAJOR(c->props_.apiVersion), ".",
          VK_API_VERSION_MINOR(c->props_.apiVersion), "; kiln needs 1.2"));
    }
    // Capabilities: read what the device supports.
    VkPhysicalDeviceVulkan11Features f11{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features f12{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    f11.pNext = &f12;
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &f11;
    vkGetPhysicalDeviceFeatures2(phys, &f2);
    VkPhysicalDeviceSubgroupProperties sub{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceDriverProperties drv{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    sub.pNext = &drv;
    VkPhysicalDeviceFloatControlsProperties fc{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
    drv.pNext = &fc;
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &sub;
    vkGetPhysicalDeviceProperties2(phys, &p2);

    Capabilities& caps = c->caps_;
    const auto& lim = c->props_.limits;
    caps.subgroup_size = sub.subgroupSize;
    caps.preserve_float_widths = (fc.shaderSignedZeroInfNanPreserveFloat16 ? 1u : 0u) |
                                 (fc.shaderSignedZeroInfNanPreserveFloat32 ? 2u : 0u) |
                                 (fc.shaderSignedZeroInfNanPreserveFloat64 ? 4u : 0u);
    caps.max_shared_memory = lim.maxComputeSharedMemorySize;
    for (int i = 0; i < 3; ++i) caps.max_group_count[i] = lim.maxComputeWorkGroupCount[i];
    // Tests lower the grid limit to reach 2-D dispatch grids with small arrays
    // (65535 * 256 elements otherwise).
    if (const auto lowered = detail::env::count("KILN_VK_MAX_GROUP_COUNT")) {
      for (auto& m : caps.max_group_count) {
        m = static_cast<std::uint32_t>(std::min<std::uint64_t>(m, *lowered));
      }
    }
    caps.max_invocations = lim.maxComputeWorkGroupInvocations;
    caps.max_bindings = std::min({kMaxBindings, lim.maxPerStageDescriptorStorageBuffers,
                                  lim.maxPerStageResources});
    caps.max_storage_buffer_range = lim.maxStorageBufferRange;
    if (const auto lowered = detail::env::count("KILN_VK_MAX_STORAGE_BUFFER_RANGE")) {
      caps.max_storage_buffer_range = std::min<std::uint64_t>(caps.max_storage_buffer_range, *lowered);
    }
    caps.max_push_constants_size = lim.maxPushConstantsSize;
    caps.min_storage_buffer_offset_alignment = lim.minStorageBufferOffsetAlignment;
    caps.non_coherent_atom_size = lim.nonCoherentAtomSize;
    caps.max_texel_buffer_elements = lim.maxTexelBufferElements;
    caps.min_texel_buffer_offset_alignment = lim.minTexelBufferOffsetAlignment;
    const bool cpu = c->props_.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    if (cpu) {
      caps.map_group_cap = 64;
      caps.matmul_shared_tiles = false;
      caps.map_chunks = true;
      caps.parallel_invocations = 4096;
    }
    if (const auto n = detail::env::count("KILN_VK_PARALLEL_INVOCATIONS")) {
      caps.parallel_invocations = static_cast<std::uint32_t>(std::max<std::uint64_t>(*n, 1));
    }
    if (env_flag("KILN_VK_MATMUL_SHARED")) caps.matmul_shared_tiles = true;
    // Tests on CPU devices raise the cap to reach the 2-D grids GPUs get.
    if (const auto cap = detail::env::count("KILN_VK_MAP_GROUP_CAP")) {
      caps.map_group_cap = static_cast<std::uint32_t>(*cap);
    }
    VkPhysicalDeviceMaintenance3Properties m3{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceProperties2 p3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p3.pNext = &m3;
    vkGetPhysicalDeviceProperties2(phys, &p3);
    caps.max_allocation_size = m3.maxMemoryAllocationSize;

    bool has_push = false, has_coop = false;
    {
      std::uint32_t n = 0;
      KILN_VK(vkEnumerateDeviceExtensionProperties(phys, nullptr, &n, nullptr));
      std::vector<VkExtensionProperties> exts(n);
      KILN_VK(vkEnumerateDeviceExtensionProperties(phys, nullptr, &n, exts.data()));
      for (const auto& e : exts) {
        if (std::strcmp(e.extensionName, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) == 0) {
          has_push = true;
        }
        if (std::strcmp(e.extensionName, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) == 0) {
          has_coop = true;
        }
      }
    }
    Quirks& q = c->quirks_;
    apply_driver_quirks(drv.driverID, q);
    q.disable_f16 = q.disable_f16 || env_flag("KILN_VK_DISABLE_F16");
    q.disable_bf16 = q.disable_bf16 || env_flag("KILN_VK_DISABLE_BF16");
    q.disable_f64 = q.disable_f64 || env_flag("KILN_VK_DISABLE_F64");
    q.disable_push_descriptor =
        q.disable_push_descriptor || env_flag("KILN_VK_DISABLE_PUSH_DESCRIPTOR");
    q.force_staging = q.force_staging || env_flag("KILN_VK_FORCE_STAGING");
    q.disable_texel_loads = q.disable_texel_loads || env_flag("KILN_VK_DISABLE_TEXEL_LOADS");
    q.disable_buffer_address =
        q.disable_buffer_address || env_flag("KILN_VK_DISABLE_BUFFER_ADDRESS");
    q.disable_coopmat = q.disable_coopmat || env_flag("KILN_VK_DISABLE_COOPMAT");
    q.sync_index_checks = env_flag("KILN_VK_SYNC_INDEX_CHECKS");
    if (cpu && !q.disable_texel_loads) {
      caps.texel_loads = true;
      for (VkFormat f : {VK_FORMAT_R32G32B32A32_SFLOAT, VK_FORMAT_R32G32B32A32_SINT,
                         VK_FORMAT_R32G32B32A32_UINT}) {
        VkFormatProperties fp{};
        vkGetPhysicalDeviceFormatProperties(phys, f, &fp);
        caps.texel_loads = caps.texel_loads &&
                           (fp.bufferFeatures & VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT) != 0;
      }
    }

    if (external != nullptr) {
      c->owns_device_ = false;
      c->device_ = external->device;
      c->family_ = external->queue_family;
      vkGetDeviceQueue(c->device_, c->family_, external->queue_index, &c->queue_);
      caps.storage_8bit = external->storage_buffer_8bit;
      caps.storage_16bit = external->storage_buffer_16bit && !q.disable_f16;
      caps.bf16 = external->storage_buffer_16bit && !q.disable_bf16;
      caps.float64 = external->shader_float64 && !q.disable_f64;
      caps.push_descriptor = false;  // the application did not enable it
      caps.int64 = false;            // nor shaderInt64 (kiln cannot tell)
      caps.buffer_device_address = external->buffer_device_address && !q.disable_buffer_address;
    } else {
      caps.storage_8bit = f12.storageBuffer8BitAccess;
      caps.storage_16bit = f11.storageBuffer16BitAccess && !q.disable_f16;
      caps.bf16 = f11.storageBuffer16BitAccess && !q.disable_bf16;
      caps.float64 = f2.features.shaderFloat64 && !q.disable_f64;
      caps.push_descriptor = has_push && !q.disable_push_descriptor;
      caps.int64 = f2.features.shaderInt64;
      caps.wide_loads = cpu && caps.int64;
      caps.buffer_device_address = f12.bufferDeviceAddress && !q.disable_buffer_address;
      caps.address_int8 = caps.buffer_device_address && caps.storage_8bit && f12.shaderInt8;
      caps.address_float16 = caps.buffer_device_address && caps.storage_16bit && f12.shaderFloat16;
      caps.address_int16 = caps.buffer_device_address && caps.bf16 && f2.features.shaderInt16;
      VkPhysicalDeviceCooperativeMatrixFeaturesNV coop{
          VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
      if (has_coop && !q.disable_coopmat && caps.storage_16bit && f12.shaderFloat16) {
        VkPhysicalDeviceFeatures2 fc{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
        fc.pNext = &coop;
        vkGetPhysicalDeviceFeatures2(phys, &fc);
        caps.coopmat = coop.cooperativeMatrix && coop_shape_supported(phys);
      }
      c->family_ = compute_family(phys, c->props_.deviceName);
      float priority = 1.0f;
      VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
      qi.queueFamilyIndex = c->family_;
      qi.queueCount = 1;
      qi.pQueuePriorities = &priority;
      VkPhysicalDeviceVulkan11Features e11{
          VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
      VkPhysicalDeviceVulkan12Features e12{
          VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
      e11.pNext = &e12;
      // f16 and bf16 share the feature; either kill switch leaves the other.
      e11.storageBuffer16BitAccess = caps.storage_16bit || caps.bf16;
      e12.storageBuffer8BitAccess = caps.storage_8bit;
      e12.bufferDeviceAddress = caps.buffer_device_address;
      e12.shaderInt8 = caps.address_int8;
      e12.shaderFloat16 = caps.address_float16 || caps.coopmat;
      VkPhysicalDeviceFeatures2 e2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
      e2.pNext = &e11;
      e2.features.shaderFloat64 = caps.float64;
      e2.features.shaderInt64 = caps.int64;
      e2.features.shaderInt16 = caps.address_int16;
      std::vector<const char*> exts;
      if (caps.push_descriptor) exts.push_back(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
      VkPhysicalDeviceCooperativeMatrixFeaturesNV ecoop{
          VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
      if (caps.coopmat) {
        exts.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
        ecoop.cooperativeMatrix = VK_TRUE;
        ecoop.pNext = e2.pNext;
        e2.pNext = &ecoop;
      }
      VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
      di.pNext = &e2;
      di.queueCreateInfoCount = 1;
      di.pQueueCreateInfos = &qi;
      di.enabledExtensionCount = static_cast<std::uint32_t>(exts.size());
      di.ppEnabledExtensionNames = exts.data();
      KILN_VK(vkCreateDevice(phys, &di, nullptr, &c->device_));
      vkGetDeviceQueue(c->device_, c->family_, 0, &c->queue_);
    }
    {
      std::uint32_t n = 0;
      vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, nullptr);
      std::vector<VkQueueFamilyProperties> fams(n);
      vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, fams.data());
      const std::uint32_t bits = c->family_ < n ? fams[c->family_].timestampValidBits : 0;
      if (bits > 0 && lim.timestampPeriod > 0.0f) {
        caps.timestamp_period = lim.timestampPeriod;
        caps.timestamp_mask = bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
      }
    }
    c->init_objects();
    return c;
  }

  // The device offers 16 x 16 x 16 subgroup matrices, f16 x f16 + f32 -> f32.
  static bool coop_shape_supported(VkPhysicalDevice phys) {
    auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
        vkGetInstanceProcAddr(instance(), "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
    if (get == nullptr) return false;
    std::uint32_t n = 0;
    if (get(phys, &n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkCooperativeMatrixPropertiesNV> props(
        n, VkCooperativeMatrixPropertiesNV{VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
    if (get(phys, &n, props.data()) != VK_SUCCESS) return false;
    for (const auto& p : props) {
      if (p.MSize == 16 && p.NSize == 16 && p.KSize == 16 && p.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
          p.BType == VK_COMPONENT_TYPE_FLOAT16_NV && p.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
          p.DType == VK_COMPONENT_TYPE_FLOAT32_NV && p.scope == VK_SCOPE_SUBGROUP_NV) {
        return true;
      }
    }
    return false;
  }

  static std::uint32_t compute_family(VkPhysicalDevice phys, const char* name) {
    std::uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, nullptr);
    std::vector<VkQueueFamilyProperties> fams(n);
    vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, fams.data());
    // Prefer a compute queue without graphics (async compute on discrete GPUs).
    for (std::uint32_t i = 0; i < n; ++i) {
      if ((fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) &&
          !(fams[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) {
        return i;
      }
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return i;
    }
    throw DeviceError(detail::str_cat("[vulkan] ", name, " has no compute queue"));
  }
};

void Context::init_objects() {
  allocator_ = std::make_unique<Allocator>(*this);
  stream_ = std::make_unique<Stream>(*this);
  pipelines_ = std::make_unique<PipelineCache>(*this);
}

Context::~Context() {
  // The stream hands staging and deferred memory back to the allocator.
  if (stream_) stream_->drop_own_buffers();
  stream_.reset();
  pipelines_.reset();
  allocator_.reset();
}

Context& Context::get(int index) {
  check_not_forked();
  auto& reg = registry();
  {
    // Every synchronize and backend lookup lands here: a context that exists is
    // returned without asking the loader again (vkEnumeratePhysicalDevices costs
    // ~80 us through Mesa's device-select layer, as much as a submit and wait).
    std::lock_guard lock(reg.mu);
    const auto i = static_cast<std::size_t>(index);
    if (index >= 0 && i < reg.contexts.size() && reg.contexts[i]) return *reg.contexts[i];
  }
  const std::size_t n_phys = [] {
    std::uint32_t n = 0;
    KILN_VK(vkEnumeratePhysicalDevices(instance(), &n, nullptr));
    return static_cast<std::size_t>(n);
  }();
  std::lock_guard lock(reg.mu);
  const std::size_t total = n_phys + reg.externals.size();
  if (index < 0 || static_cast<std::size_t>(index) >= total) {
    throw DeviceError(detail::str_cat(
        "[vulkan] there is no device vulkan:", index, " (this machine has ",
        total, " Vulkan device", total == 1 ? "" : "s",
        "; see kiln::devices())"));
  }
  if (reg.contexts.size() < total) reg.contexts.resize(total);
  auto& slot = reg.contexts[static_cast<std::size_t>(index)];
  if (!slot) {
    if (static_cast<std::size_t>(index) >= n_phys &&
        reg.externals[static_cast<std::size_t>(index) - n_phys].released) {
      throw DeviceError(detail::str_cat(
          "[vulkan] vulkan:", index, " was released by the application "
          "(vulkan::release_external_device); it cannot be used any more"));
    }
    if (static_cast<std::size_t>(index) < n_phys) {
      std::uint32_t n = static_cast<std::uint32_t>(n_phys);
      std::vector<VkPhysicalDevice> phys(n);
      KILN_VK(vkEnumeratePhysicalDevices(instance(), &n, phys.data()));
      slot = ContextFactory::create(index, phys[static_cast<std::size_t>(index)],
                                    nullptr);
    } else {
      const auto& e = reg.externals[static_cast<std::size_t>(index) - n_phys].device;
      slot = ContextFactory::create(index, e.physical_device, &e);
    }
  }
  return *slot;
}

std::size_t Context::allocator_heap_size() const { return allocator_->heap_size(); }

void Context::require_dtype(DType dtype, const char* op) const {
  const char* missing = nullptr;
  if (dtype == DType::kBool && !caps_.storage_8bit) missing = "storageBuffer8BitAccess";
  if (dtype == DType::kF16 && !caps_.storage_16bit) {
    missing = quirks_.disable_f16 ? "f16 (disabled by KILN_VK_DISABLE_F16)"
                                  : "storageBuffer16BitAccess";
  }
  if (dtype == DType::kBF16 && !caps_.bf16) {
    missing = quirks_.disable_bf16 ? "bf16 (disabled by KILN_VK_DISABLE_BF16)"
                                   : "storageBuffer16BitAccess";
  }
  if (dtype == DType::kF64 && !caps_.float64) {
    missing = quirks_.disable_f64 ? "f64 (disabled by KILN_VK_DISABLE_F64)"
                                  : "shaderFloat64";
  }
  if (missing != nullptr) {
    throw DTypeError(detail::str_cat("[", op, "] dtype ", kiln::name(dtype),
                                     " is not supported on ", device().to_string(),
                                     " (", props_.deviceName, "): the device lacks ",
                                     missing, "; use another dtype or the cpu device"));
  }
}

}  // namespace kiln::vk

namespace kiln::vulkan {

Device use_external_device(const ExternalDevice& external) {
  if (external.device == VK_NULL_HANDLE || external.physical_device == VK_NULL_HANDLE) {
    throw DeviceError("[vulkan.use_external_device] device and physical_device must be set");
  }
  std::uint32_t n = 0;
  KILN_VK(vkEnumeratePhysicalDevices(vk::instance(), &n, nullptr));
  auto& reg = vk::registry();
  std::lock_guard lock(reg.mu);
  reg.externals.push_back({external});
  return Device::vulkan(static_cast<int>(n + reg.externals.size() - 1));
}

void release_external_device(Device device) {
  std::uint32_t n = 0;
  KILN_VK(vkEnumeratePhysicalDevices(vk::instance(), &n, nullptr));
  auto& reg = vk::registry();
  std::unique_lock lock(reg.mu);
  const auto at = static_cast<std::size_t>(device.index) - n;
  if (device.kind != Device::Kind::kVulkan || device.index < static_cast<int>(n) ||
      at >= reg.externals.size()) {
    throw DeviceError(detail::str_cat(
        "[vulkan.release_external_device] ", device.to_string(),
        " is not a device the application gave kiln with use_external_device"));
  }
  if (reg.externals[at].released) return;
  std::unique_ptr<vk::Context> context;
  const auto slot = static_cast<std::size_t>(device.index);
  if (slot < reg.contexts.size() && reg.contexts[slot]) {
    vk::Context& c = *reg.contexts[slot];
    c.stream().synchronize();  // kiln's work done; dead arrays' memory comes back
    if (const std::size_t live = c.live_buffers().load() - c.stream().own_buffers(); live > 0) {
      throw DeviceError(detail::str_cat(
          "[vulkan.release_external_device] ", live, " array", live == 1 ? "" : "s",
          " still live on ", device.to_string(),
          "; drop them (and jitted functions whose programs hold them) first"));
    }
    context = std::move(reg.contexts[slot]);
  }
  reg.externals[at].released = true;
  lock.unlock();
  vk::forget_backend(device.index);
  context.reset();  // destroys kiln's objects on the device
}

}  // namespace kiln::vulkan
