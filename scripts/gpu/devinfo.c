/* Prints what the Vulkan loader sees: each physical device's name, type, API
 * and driver versions, driver id/name/info, and a few compute limits kiln uses.
 * Built by .gpu/pack.sh against the bundled libvulkan.so.1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

int main(void) {
  VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "kiln-devinfo";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo info = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  VkInstance inst;
  VkResult r = vkCreateInstance(&info, NULL, &inst);
  if (r != VK_SUCCESS) {
    printf("devinfo: vkCreateInstance failed: %d\n", (int)r);
    return 1;
  }
  uint32_t lc = 0;
  vkEnumerateInstanceLayerProperties(&lc, NULL);
  VkLayerProperties layers[64];
  if (lc > 64) lc = 64;
  vkEnumerateInstanceLayerProperties(&lc, layers);
  for (uint32_t i = 0; i < lc; ++i)
    printf("layer: %s (spec %u.%u.%u)\n", layers[i].layerName,
           VK_API_VERSION_MAJOR(layers[i].specVersion),
           VK_API_VERSION_MINOR(layers[i].specVersion),
           VK_API_VERSION_PATCH(layers[i].specVersion));
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(inst, &n, NULL);
  VkPhysicalDevice devs[16];
  if (n > 16) n = 16;
  vkEnumeratePhysicalDevices(inst, &n, devs);
  printf("physical devices: %u\n", n);
  for (uint32_t i = 0; i < n; ++i) {
    VkPhysicalDeviceDriverProperties drv = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sg = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    sg.pNext = &drv;
    VkPhysicalDeviceProperties2 p2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &sg;
    vkGetPhysicalDeviceProperties2(devs[i], &p2);
    const VkPhysicalDeviceProperties* p = &p2.properties;
    const VkPhysicalDeviceLimits* l = &p->limits;
    printf("[%u] deviceName=%s type=%d vendor=0x%04x device=0x%04x api=%u.%u.%u driverVersion=0x%08x\n",
           i, p->deviceName, (int)p->deviceType, p->vendorID, p->deviceID,
           VK_API_VERSION_MAJOR(p->apiVersion), VK_API_VERSION_MINOR(p->apiVersion),
           VK_API_VERSION_PATCH(p->apiVersion), p->driverVersion);
    printf("    driverID=%d driverName=%s driverInfo=%s conformance=%u.%u.%u.%u\n",
           (int)drv.driverID, drv.driverName, drv.driverInfo,
           drv.conformanceVersion.major, drv.conformanceVersion.minor,
           drv.conformanceVersion.subminor, drv.conformanceVersion.patch);
    printf("    subgroupSize=%u maxComputeWorkGroupInvocations=%u maxComputeSharedMemorySize=%u "
           "maxStorageBufferRange=%u maxComputeWorkGroupCount=%u,%u,%u maxPushConstantsSize=%u\n",
           sg.subgroupSize, l->maxComputeWorkGroupInvocations, l->maxComputeSharedMemorySize,
           l->maxStorageBufferRange, l->maxComputeWorkGroupCount[0],
           l->maxComputeWorkGroupCount[1], l->maxComputeWorkGroupCount[2],
           l->maxPushConstantsSize);
    /* Extensions kiln's GPU kernels look for, and the NV cooperative-matrix
       shapes the driver offers (issue 40). */
    uint32_t ne = 0;
    vkEnumerateDeviceExtensionProperties(devs[i], NULL, &ne, NULL);
    VkExtensionProperties* exts = calloc(ne ? ne : 1, sizeof *exts);
    vkEnumerateDeviceExtensionProperties(devs[i], NULL, &ne, exts);
    int has_nv = 0;
    printf("    extensions:");
    for (uint32_t e = 0; e < ne; ++e) {
      const char* n = exts[e].extensionName;
      if (strstr(n, "cooperative") || strstr(n, "bfloat16") || strstr(n, "float16") ||
          strstr(n, "subgroup") || strstr(n, "integer_dot") || strstr(n, "memory_model") ||
          strstr(n, "shader_float_controls") || strstr(n, "push_descriptor"))
        printf(" %s", n);
      if (strcmp(n, "VK_NV_cooperative_matrix") == 0) has_nv = 1;
    }
    printf(" (%u in all)\n", ne);
    free(exts);
    if (has_nv) {
      PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV get =
          (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)vkGetInstanceProcAddr(
              inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
      uint32_t nc = 0;
      if (get) get(devs[i], &nc, NULL);
      VkCooperativeMatrixPropertiesNV* cp = calloc(nc ? nc : 1, sizeof *cp);
      for (uint32_t c = 0; c < nc; ++c) cp[c].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
      if (get) get(devs[i], &nc, cp);
      for (uint32_t c = 0; c < nc; ++c)
        printf("    coopmat NV: M=%u N=%u K=%u A=%d B=%d C=%d D=%d scope=%d\n", cp[c].MSize,
               cp[c].NSize, cp[c].KSize, (int)cp[c].AType, (int)cp[c].BType, (int)cp[c].CType,
               (int)cp[c].DType, (int)cp[c].scope);
      free(cp);
    }
    VkPhysicalDeviceVulkan12Properties p12 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES};
    VkPhysicalDeviceProperties2 q2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    q2.pNext = &p12;
    vkGetPhysicalDeviceProperties2(devs[i], &q2);
    printf("    timestampPeriod=%.3f ns, denorm f16/f32 preserve=%d/%d rte f16/f32=%d/%d\n",
           (double)l->timestampPeriod, (int)p12.shaderDenormPreserveFloat16,
           (int)p12.shaderDenormPreserveFloat32, (int)p12.shaderRoundingModeRTEFloat16,
           (int)p12.shaderRoundingModeRTEFloat32);
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(devs[i], &mp);
    for (uint32_t h = 0; h < mp.memoryHeapCount; ++h)
      printf("    heap %u: %.1f GiB flags=0x%x\n", h,
             (double)mp.memoryHeaps[h].size / (1024.0 * 1024 * 1024), mp.memoryHeaps[h].flags);
  }
  vkDestroyInstance(inst, NULL);
  return 0;
}
