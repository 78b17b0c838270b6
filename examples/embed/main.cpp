// An application that owns a Vulkan device lends it to kiln, runs a jitted
// loss-and-gradient on it, then takes it back and destroys it. Without a Vulkan
// compute device it runs the same code on kiln's CPU device. It checks its own
// result: it prints "loss 29 grad -44 -62" and exits 0, or exits 1.
// With KILN_VALIDATION=1 the application's instance gets the validation layer too
// (kiln's layer sees only kiln's own instance), and any message fails the run.
#include <kiln/backends/vulkan/external.hpp>
#include <kiln/kiln.hpp>
#include <vulkan/vulkan.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace {

int g_validation_messages = 0;

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                          VkDebugUtilsMessageTypeFlagsEXT,
                                          const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  std::cerr << "embed: validation: " << data->pMessage << "\n";
  ++g_validation_messages;
  return VK_FALSE;
}

// A Vulkan struct with its sType set and every other member zero.
template <class T>
T vk_struct(VkStructureType type) {
  T s{};
  s.sType = type;
  return s;
}

bool validation_requested() {
  const char* v = std::getenv("KILN_VALIDATION");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

// The application's own Vulkan objects (kiln is given them, owns none of them).
struct AppVulkan {
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  kiln::vulkan::ExternalDevice device;  // handles + the features enabled on it
  std::string name;
};

void destroy_vulkan(AppVulkan& app) {
  if (app.device.device != VK_NULL_HANDLE) vkDestroyDevice(app.device.device, nullptr);
  if (app.messenger != VK_NULL_HANDLE) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(app.instance, "vkDestroyDebugUtilsMessengerEXT"));
    destroy(app.instance, app.messenger, nullptr);
  }
  vkDestroyInstance(app.instance, nullptr);
}

// Its instance and a device with one compute queue, or nullopt when the machine
// has no Vulkan 1.2 device with a compute queue (or no Vulkan driver at all).
std::optional<AppVulkan> create_vulkan() {
  AppVulkan app;
  auto ai = vk_struct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  ai.pApplicationName = "kiln-embed";
  ai.apiVersion = VK_API_VERSION_1_2;
  auto ii = vk_struct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  ii.pApplicationInfo = &ai;
  const char* layer = "VK_LAYER_KHRONOS_validation";
  const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
  VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
  auto features = vk_struct<VkValidationFeaturesEXT>(VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT);
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = &sync;
  auto mi = vk_struct<VkDebugUtilsMessengerCreateInfoEXT>(
      VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  mi.messageType =
      VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
  mi.pfnUserCallback = on_message;
  if (validation_requested()) {
    ii.enabledLayerCount = 1;
    ii.ppEnabledLayerNames = &layer;
    ii.enabledExtensionCount = 1;
    ii.ppEnabledExtensionNames = &ext;
    features.pNext = &mi;
    ii.pNext = &features;
  }
  const VkResult r = vkCreateInstance(&ii, nullptr, &app.instance);
  if (r == VK_ERROR_LAYER_NOT_PRESENT) {
    throw std::runtime_error("KILN_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not installed");
  }
  if (r != VK_SUCCESS) return std::nullopt;  // no loader driver: no Vulkan here
  if (validation_requested()) {
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(app.instance, "vkCreateDebugUtilsMessengerEXT"));
    if (create == nullptr || create(app.instance, &mi, nullptr, &app.messenger) != VK_SUCCESS) {
      throw std::runtime_error("cannot create the validation messenger");
    }
  }
  std::uint32_t n = 0;
  std::vector<VkPhysicalDevice> phys;
  if (vkEnumeratePhysicalDevices(app.instance, &n, nullptr) == VK_SUCCESS) phys.resize(n);
  if (n > 0 && vkEnumeratePhysicalDevices(app.instance, &n, phys.data()) < 0) phys.clear();
  for (VkPhysicalDevice p : phys) {
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(p, &props);
    if (props.apiVersion < VK_API_VERSION_1_2) continue;  // kiln needs 1.2
    std::uint32_t nf = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &nf, nullptr);
    std::vector<VkQueueFamilyProperties> fams(nf);
    vkGetPhysicalDeviceQueueFamilyProperties(p, &nf, fams.data());
    std::uint32_t family = 0;
    while (family < nf && !(fams[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++family;
    if (family == nf) continue;
    // Enable the optional features kiln uses where the device has them, and say so.
    auto f12 = vk_struct<VkPhysicalDeviceVulkan12Features>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
    auto f2 = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
    f2.pNext = &f12;
    vkGetPhysicalDeviceFeatures2(p, &f2);
    auto e12 = vk_struct<VkPhysicalDeviceVulkan12Features>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
    e12.storageBuffer8BitAccess = f12.storageBuffer8BitAccess;
    float priority = 1.0f;
    auto qi = vk_struct<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
    qi.queueFamilyIndex = family;
    qi.queueCount = 1;
    qi.pQueuePriorities = &priority;
    auto di = vk_struct<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
    di.pNext = &e12;
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    VkDevice device = VK_NULL_HANDLE;
    if (vkCreateDevice(p, &di, nullptr, &device) != VK_SUCCESS) continue;
    app.device = {.instance = app.instance,
                  .physical_device = p,
                  .device = device,
                  .queue_family = family,
                  .storage_buffer_8bit = e12.storageBuffer8BitAccess == VK_TRUE};
    app.name = props.deviceName;
    return app;
  }
  destroy_vulkan(app);
  return std::nullopt;
}

// sum((x w - y)^2): a least-squares loss of the weights w.
kiln::Array loss(const kiln::Array& w, const kiln::Array& x, const kiln::Array& y) {
  const kiln::Array r = kiln::matmul(x, w) - y;
  return kiln::sum(r * r);
}

// The loss and its gradient at fixed data, jitted, on `device`. Every kiln array
// on the device is gone when this returns (the jitted function too).
bool run_on(kiln::Device device) {
  const kiln::Array x = kiln::to_device(kiln::array<float>({0, 1, 2, 3, 4, 5}, {3, 2}), device);
  const kiln::Array y = kiln::to_device(kiln::array<float>({1, 1, 1}, {3, 1}), device);
  const kiln::Array w = kiln::to_device(kiln::array<float>({0.5f, -1}, {2, 1}), device);
  auto step =
      kiln::filter_jit([](const kiln::Array& w, const kiln::Array& x, const kiln::Array& y) {
        auto [l, g] = kiln::value_and_grad(loss)(w, x, y);
        return std::tuple{l, g};
      });
  const auto [l, g] = step(w, x, y);
  const float value = l.item<float>();
  const std::vector<float> grad = g.to_vector<float>();
  std::cout << "loss " << value << " grad " << grad[0] << " " << grad[1] << "\n";
  // x w - y = [-2, -3, -4]: loss 4 + 9 + 16; grad 2 x^T (x w - y).
  return l.device() == device && g.device() == device && value == 29.0f &&
         grad == std::vector<float>{-44, -62};
}

}  // namespace

int main() try {
  std::optional<AppVulkan> app = create_vulkan();
  kiln::Device device = kiln::Device::cpu();
  if (app) {
    device = kiln::vulkan::use_external_device(app->device);
    std::cout << "kiln runs on the application's Vulkan device " << app->name << " as " << device
              << "\n";
  } else {
    std::cout << "no Vulkan compute device: kiln runs on the cpu\n";
  }
  const bool ok = run_on(device);
  if (app) {
    kiln::vulkan::release_external_device(device);  // kiln's objects on it are gone
    destroy_vulkan(*app);
  }
  if (g_validation_messages > 0) {
    std::cerr << "embed: " << g_validation_messages << " validation message(s)\n";
    return 1;
  }
  if (!ok) std::cerr << "embed: wrong result (or not on " << device << ")\n";
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "embed: " << e.what() << "\n";
  return 1;
}
