// A Vulkan device as the backend sees it: handles, capabilities read from the
// device (never assumed), the quirk table with its environment kill switches, and
// the validation-message sink. One Context per kiln device index; the process has
// one VkInstance (unless an application brings its own device).
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/runtime/device.hpp"
#include "kiln/runtime/dtype.hpp"

namespace kiln::vk {

class Allocator;
class Stream;
class PipelineCache;

struct Capabilities {
  bool storage_8bit = false;   // bool arrays (stored as bytes)
  bool storage_16bit = false;  // f16 arrays (arithmetic runs in f32)
  // bf16 arrays: stored as u16 words (the upper halves of f32s), loaded by a
  // shift and stored with an integer round to nearest even, computed in f32.
  // Needs only storageBuffer16BitAccess (no bf16 arithmetic: lavapipe and most
  // GPUs have none); KILN_VK_DISABLE_BF16=1 turns it off, and bf16 arrays are
  // then refused with a DTypeError naming the op.
  bool bf16 = false;
  bool float64 = false;
  bool push_descriptor = false;
  bool int64 = false;           // shaderInt64 (enabled when the device has it)
  std::uint32_t subgroup_size = 0;
  std::uint32_t max_shared_memory = 0;
  std::array<std::uint32_t, 3> max_group_count{};
  std::uint32_t max_invocations = 0;
  // Storage buffers one kernel may bind: the device's per-stage limits, at most
  // Stream's kMaxBindings (fused kernels with more operands run unfused).
  std::uint32_t max_bindings = 4;
  // What one storage-buffer descriptor can address. KILN_VK_MAX_STORAGE_BUFFER_RANGE=N
  // lowers it (never raises it), so tests reach the device-address path with
  // small arrays.
  std::uint64_t max_storage_buffer_range = 0;
  // bufferDeviceAddress (Vulkan 1.2, required in 1.3): kernels read and write
  // arrays larger than max_storage_buffer_range through their device addresses
  // (spv::Builder address bindings), up to max_allocation_size. Without it such
  // arrays are refused with an OutOfMemoryError. KILN_VK_DISABLE_BUFFER_ADDRESS=1
  // turns it off.
  bool buffer_device_address = false;
  // shaderInt8 / shaderFloat16, enabled with it: SPIR-V only lets a pointer to
  // bytes or halves be made from an address when the module declares Int8 /
  // Float16, so large bool / f16 arrays need these.
  bool address_int8 = false;
  bool address_float16 = false;
  bool address_int16 = false;  // shaderInt16: the same for bf16's u16 words
  std::uint32_t max_push_constants_size = 128;
  std::uint64_t min_storage_buffer_offset_alignment = 0;
  std::uint64_t max_allocation_size = 0;
  std::uint64_t non_coherent_atom_size = 0;
  // Most workgroups a map kernel launches; each invocation loops over the rest.
  // CPU implementations pay per workgroup, so they get few, long-running ones.
  // KILN_VK_MAP_GROUP_CAP=N overrides it (tests reach 2-D grids on lavapipe).
  std::uint32_t map_group_cap = 1u << 20;
  // Invocations a kernel should launch to keep the device busy: reductions and
  // scatters split their work that far (more slices, blocks of rows), paying
  // extra combining for it. CPU implementations run few lanes and pay per
  // workgroup. KILN_VK_PARALLEL_INVOCATIONS=N overrides it (tests reach the
  // split forms on lavapipe).
  std::uint32_t parallel_invocations = 1u << 17;
  // Matmul stages tiles in shared memory (GPUs); CPU implementations do better
  // with register tiles read straight from memory (no barriers).
  bool matmul_shared_tiles = true;
  // CPU implementations run each storage-buffer load and store as a loop over
  // the SIMD lanes (lavapipe), so a kernel pays per access, not per byte: with
  // this set, matmul and map kernels read 8 contiguous 32-bit elements per
  // access as four u64 (CPU-type devices with int64; GPUs keep 16-byte vectors).
  bool wide_loads = false;
  // Map kernels give each workgroup of one subgroup a contiguous chunk of the
  // elements instead of a grid-stride loop (CPU-type devices): a CPU
  // implementation runs a workgroup's SIMD slices one after the other, and a
  // grid stride makes every slice jump by the whole grid at each step, which
  // defeats the hardware prefetchers (a 16M-element add ran 2.5x slower).
  bool map_chunks = false;
  // Matmul and map kernels read unit-stride operands through uniform texel
  // buffers (R32G32B32A32 views, 4 elements per texel) on CPU-type devices whose
  // formats allow it: lavapipe fetches texels without the per-lane loop of a
  // storage-buffer load (one 16-byte load per lane and a 4 x 8 transpose; 1.4x
  // on its 1024^2 matmul). KILN_VK_DISABLE_TEXEL_LOADS=1 turns it off.
  bool texel_loads = false;
  std::uint64_t max_texel_buffer_elements = 0;
  std::uint64_t min_texel_buffer_offset_alignment = 0;
  // Tensor cores: VK_NV_cooperative_matrix with 16 x 16 x 16 f16 x f16 -> f32
  // subgroup matrices (and shaderFloat16, enabled with it). f16 matmul then
  // runs on them (kernel_matmul.cpp). KILN_VK_DISABLE_COOPMAT=1 turns it off.
  // (VK_KHR_cooperative_matrix, which also has bf16, needs SPIRV-Tools and
  // Vulkan headers newer than Debian 12's to assemble and validate.)
  bool coopmat = false;
  // Float widths (bit 0: 16, 1: 32, 2: 64) whose NaN, Inf and signed zeros a
  // kernel can make the driver keep (shaderSignedZeroInfNanPreserveFloatN).
  // Without the SignedZeroInfNanPreserve execution mode Vulkan lets a driver
  // disregard them (on an H200, erf(NaN) came back +-1 and atan2(1, inf) -0);
  // every kernel declares it for the widths it uses (PipelineCache::compile).
  std::uint32_t preserve_float_widths = 0;
  // Timestamps on the compute queue (Stream's kernel profile): nanoseconds per
  // tick, 0 where the queue family has none; the valid bits of a timestamp.
  double timestamp_period = 0.0;
  std::uint64_t timestamp_mask = 0;
};

// Optional features kiln can do without. Each is set from the device, then by the
// driver table in context.cpp, then by its KILN_VK_* environment switch.
struct Quirks {
  bool disable_f16 = false;             // KILN_VK_DISABLE_F16=1
  bool disable_bf16 = false;            // KILN_VK_DISABLE_BF16=1
  bool disable_f64 = false;             // KILN_VK_DISABLE_F64=1
  bool disable_push_descriptor = false; // KILN_VK_DISABLE_PUSH_DESCRIPTOR=1
  bool force_staging = false;           // KILN_VK_FORCE_STAGING=1: never map
                                        // device memory (tests the staging path)
  bool pipeline_cache_header_only = false;  // driver returns no pipeline data
  bool disable_texel_loads = false;     // KILN_VK_DISABLE_TEXEL_LOADS=1
  bool disable_buffer_address = false;  // KILN_VK_DISABLE_BUFFER_ADDRESS=1
  bool disable_coopmat = false;         // KILN_VK_DISABLE_COOPMAT=1
  // KILN_VK_SYNC_INDEX_CHECKS=1: compiled programs check gather/scatter indices
  // on the host, as eager calls do (vulkan_backend.cpp check_indices).
  bool sync_index_checks = false;
  // The driver ends a kernel's loops after this many iterations per invocation,
  // counted over all its loops (0: no limit). llvmpipe: 65535 (gallivm's
  // LP_MAX_TGSI_LOOP_ITERATIONS). Kernels keep each invocation's iterations
  // under it: map kernels launch more workgroups, reductions unroll their loops,
  // and a matmul whose K loop cannot is refused.
  std::uint32_t max_loop_iterations = 0;
};

class Context {
 public:
  // The context of vulkan:index, created on first use. Throws DeviceError for an
  // index no device has.
  static Context& get(int index);
  // Destroys kiln's objects on the device. Runs only for an application's device
  // it releases (vulkan::release_external_device), after its work finished and
  // its arrays died: kiln's own contexts live until process exit.
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device device() const { return Device::vulkan(index_); }
  VkDevice handle() const { return device_; }
  VkPhysicalDevice physical() const { return physical_; }
  VkQueue queue() const { return queue_; }
  std::uint32_t queue_family() const { return family_; }
  const VkPhysicalDeviceProperties& properties() const { return props_; }
  const VkPhysicalDeviceMemoryProperties& memory() const { return memory_; }
  const Capabilities& caps() const { return caps_; }
  const Quirks& quirks() const { return quirks_; }
  std::string name() const { return props_.deviceName; }

  // Throws DTypeError when this device cannot hold arrays of `dtype`.
  void require_dtype(DType dtype, const char* op) const;

  Allocator& allocator() { return *allocator_; }
  std::size_t allocator_heap_size() const;
  Stream& stream() { return *stream_; }
  PipelineCache& pipelines() { return *pipelines_; }
  std::mutex& mutex() { return mu_; }
  // Arrays whose buffers live on this device (VulkanBuffer counts itself).
  std::atomic<std::size_t>& live_buffers() { return live_buffers_; }

 private:
  friend struct ContextFactory;
  Context() = default;
  void init_objects();

  int index_ = 0;
  bool owns_device_ = true;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  std::uint32_t family_ = 0;
  VkPhysicalDeviceProperties props_{};
  VkPhysicalDeviceMemoryProperties memory_{};
  Capabilities caps_;
  Quirks quirks_;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<PipelineCache> pipelines_;
  std::mutex mu_;
  std::atomic<std::size_t> live_buffers_{0};
};

// The process's instance (created on first use; with VK_LAYER_KHRONOS_validation
// and synchronization validation when KILN_VALIDATION=1).
VkInstance instance();
// DeviceError in a child fork()ed after this process created its Vulkan
// instance: the child shares the parent's device objects and queues but not
// its threads or driver state, and Vulkan defines nothing across fork (lavapipe
// hangs). One relaxed load; called where Vulkan work starts (context and
// backend lookup, the stream's submissions, uploads and reads).
void check_not_forked();
// Physical devices in enumeration order (vulkan:N is the N-th), then external ones.
std::vector<VkPhysicalDevice> physical_devices();
bool validation_enabled();
// Validation messages since the last call; the backend throws them at sync points.
std::vector<std::string> take_validation_messages();

}  // namespace kiln::vk
