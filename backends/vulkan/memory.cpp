// Block suballocation: first fit over a coalescing free list per block. Blocks of
// 64 MiB (bounded by maxMemoryAllocationSize); an array larger than half a block
// gets a dedicated block, released as soon as the array dies. kiln enforces the
// heap size itself, so running out is a clear OutOfMemoryError on every driver.
#include "kiln/backends/vulkan/memory.hpp"

#include <algorithm>

#include "kiln/backends/vulkan/check.hpp"
#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/stream.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {

VkDeviceSize round_up(VkDeviceSize x, VkDeviceSize a) { return (x + a - 1) / a * a; }

// Empty blocks kept for reuse (dedicated ones by size), at most a quarter of
// the heap and at least this many bytes together: releasing a block and
// allocating a fresh one costs a page fault per page at first touch on
// unified-memory devices, as much as the kernel writing it, and on a discrete
// GPU a driver call and a clear of the new memory on the device (NVIDIA H200:
// a transformer step's 128 MiB attention arrays cycled through fresh blocks
// took 23 ms of host time and ~60 ms of device time a step). Kept blocks are
// released whenever the heap is short, so keeping more never refuses an array.
constexpr std::size_t kMinKeptBytes = 512ull << 20;

int find_type(const VkPhysicalDeviceMemoryProperties& mem, VkMemoryPropertyFlags want) {
  for (std::uint32_t i = 0; i < mem.memoryTypeCount; ++i) {
    if ((mem.memoryTypes[i].propertyFlags & want) == want) return static_cast<int>(i);
  }
  return -1;
}

std::string mib(std::size_t bytes) {
  return detail::str_cat(static_cast<double>(bytes) / (1024.0 * 1024.0), " MiB");
}

}  // namespace

Allocator::Allocator(Context& ctx) : ctx_(ctx) {
  const auto& mem = ctx.memory();
  const auto& caps = ctx.caps();
  const VkMemoryPropertyFlags local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  const VkMemoryPropertyFlags host =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const auto type = ctx.properties().deviceType;
  const bool unified = type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
                       type == VK_PHYSICAL_DEVICE_TYPE_CPU;
  int t = -1;
  if (unified && !ctx.quirks().force_staging) {
    t = find_type(mem, local | host);
    direct_ = t >= 0;
  }
  if (t < 0) t = find_type(mem, local);
  if (t < 0) t = find_type(mem, host);
  int s = find_type(mem, host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  if (s < 0) s = find_type(mem, host);
  if (t < 0 || s < 0) {
    throw DeviceError(detail::str_cat("[vulkan] ", ctx.name(),
                                      " has no usable memory type for storage buffers"));
  }
  device_type_ = static_cast<std::uint32_t>(t);
  staging_type_ = static_cast<std::uint32_t>(s);
  heap_size_ = mem.memoryHeaps[mem.memoryTypes[device_type_].heapIndex].size;
  max_kept_ = std::max(kMinKeptBytes, heap_size_ / 4);
  alignment_ = std::max<VkDeviceSize>({caps.min_storage_buffer_offset_alignment,
                                       caps.non_coherent_atom_size, 64});
  // Texel-buffer views start at an array's offset (alignments are powers of two).
  if (caps.texel_loads) {
    alignment_ = std::max<VkDeviceSize>(alignment_, caps.min_texel_buffer_offset_alignment);
  }
  if (caps.max_allocation_size > 0) {
    block_size_ = std::min<VkDeviceSize>(block_size_, caps.max_allocation_size);
  }
}

// Only for a released device (Context::~Context): every array is gone by then.
Allocator::~Allocator() {
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    if (blocks_[i].memory != VK_NULL_HANDLE) release_block(static_cast<int>(i));
  }
}

int Allocator::new_block(bool staging, VkDeviceSize size, bool dedicated,
                         const std::string& what) {
  const VkDevice dev = ctx_.handle();
  const auto& caps = ctx_.caps();
  if (caps.max_allocation_size > 0 && size > caps.max_allocation_size) {
    throw OutOfMemoryError(detail::str_cat(
        "[vulkan] ", what, " needs ", mib(size), " in one allocation; ",
        ctx_.device().to_string(), " allows at most ", mib(caps.max_allocation_size)));
  }
  if (!staging && heap_used_ + size > heap_size_) {
    throw OutOfMemoryError(detail::str_cat(
        "[vulkan] out of device memory: ", what, " needs ", mib(size), " but ",
        mib(heap_used_), " of the ", mib(heap_size_), " heap of ",
        ctx_.device().to_string(), " (", ctx_.name(),
        ") is in use; free arrays or use smaller batches"));
  }
  Block b;
  b.size = size;
  b.staging = staging;
  b.dedicated = dedicated;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = size;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  if (!staging && ctx_.caps().texel_loads) bi.usage |= VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT;
  // Every device block can be addressed: which arrays a kernel reads through
  // their addresses depends on the kernel's view ranges, not on the block.
  const bool addressed = !staging && caps.buffer_device_address;
  if (addressed) bi.usage |= VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  KILN_VK(vkCreateBuffer(dev, &bi, nullptr, &b.buffer));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev, b.buffer, &req);
  const std::uint32_t type = staging ? staging_type_ : device_type_;
  if (!(req.memoryTypeBits & (1u << type))) {
    vkDestroyBuffer(dev, b.buffer, nullptr);
    throw DeviceError("[vulkan] storage buffers cannot use the chosen memory type");
  }
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  if (addressed) ai.pNext = &flags;
  const VkResult r = vkAllocateMemory(dev, &ai, nullptr, &b.memory);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(dev, b.buffer, nullptr);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
      throw OutOfMemoryError(detail::str_cat(
          "[vulkan] out of device memory: the driver refused ", mib(req.size), " for ",
          what, " with ", mib(heap_used_), " of the ", mib(heap_size_), " heap of ",
          ctx_.device().to_string(), " (", ctx_.name(),
          ") in use by kiln (other processes may hold the rest); free arrays or use "
          "smaller batches"));
    }
    KILN_VK(r);
  }
  KILN_VK(vkBindBufferMemory(dev, b.buffer, b.memory, 0));
  if (addressed) {
    VkBufferDeviceAddressInfo info{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
    info.buffer = b.buffer;
    b.address = vkGetBufferDeviceAddress(dev, &info);
  }
  if (staging || direct_) {
    void* p = nullptr;
    KILN_VK(vkMapMemory(dev, b.memory, 0, VK_WHOLE_SIZE, 0, &p));
    b.mapped = static_cast<std::byte*>(p);
  }
  b.free.emplace(0, size);
  if (!staging) heap_used_ += size;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    if (blocks_[i].memory == VK_NULL_HANDLE) {
      blocks_[i] = std::move(b);
      return static_cast<int>(i);
    }
  }
  blocks_.push_back(std::move(b));
  return static_cast<int>(blocks_.size() - 1);
}

void Allocator::release_block(int index) {
  Block& b = blocks_[static_cast<std::size_t>(index)];
  const VkDevice dev = ctx_.handle();
  if (b.mapped) vkUnmapMemory(dev, b.memory);
  vkDestroyBuffer(dev, b.buffer, nullptr);
  vkFreeMemory(dev, b.memory, nullptr);
  if (!b.staging) heap_used_ -= b.size;
  b = Block{};
}

VkDeviceSize Allocator::reserved_size(std::size_t nbytes) const {
  VkDeviceSize size = round_up(std::max<std::size_t>(nbytes, 1), alignment_);
  if (size > block_size_ / 2) size = round_up(size, 1ull << 20);
  return size;
}

Allocation Allocator::allocate_in(bool staging, std::size_t nbytes,
                                  const std::string& what) {
  const VkDeviceSize size = reserved_size(nbytes);
  std::lock_guard lock(mu_);
  int found = -1;
  VkDeviceSize offset = 0;
  if (size <= block_size_ / 2) {
    for (std::size_t i = 0; i < blocks_.size() && found < 0; ++i) {
      Block& b = blocks_[i];
      if (b.memory == VK_NULL_HANDLE || b.staging != staging || b.dedicated) continue;
      for (auto it = b.free.begin(); it != b.free.end(); ++it) {
        if (it->second >= size) {
          found = static_cast<int>(i);
          offset = it->first;
          const VkDeviceSize rest = it->second - size;
          b.free.erase(it);
          if (rest > 0) b.free.emplace(offset + size, rest);
          break;
        }
      }
    }
    if (found < 0) {
      if (!staging && heap_used_ + block_size_ > heap_size_) release_kept();
      found = new_block(staging, block_size_, false, what);
      Block& b = blocks_[static_cast<std::size_t>(found)];
      b.free.clear();
      b.free.emplace(size, block_size_ - size);
      offset = 0;
    }
  } else {
    // Dedicated: reuse a kept block of the same size (a fresh one page-faults on
    // first touch on unified-memory devices), else allocate, releasing kept
    // blocks first if the heap is short.
    for (std::size_t i = 0; i < blocks_.size() && found < 0; ++i) {
      Block& b = blocks_[i];
      if (b.memory != VK_NULL_HANDLE && b.dedicated && b.kept && b.staging == staging &&
          b.size == size) {
        found = static_cast<int>(i);
      }
    }
    if (found < 0) {
      if (!staging && heap_used_ + size > heap_size_) release_kept();
      found = new_block(staging, size, true, what);
    }
    blocks_[static_cast<std::size_t>(found)].free.clear();
  }
  Block& b = blocks_[static_cast<std::size_t>(found)];
  if (b.kept) {
    kept_ -= b.size;
    b.kept = false;
  }
  b.used += size;
  if (!staging) {
    in_use_ += size;
    peak_ = std::max(peak_, in_use_);
  }
  Allocation a;
  a.buffer = b.buffer;
  a.offset = offset;
  a.size = size;
  a.mapped = b.mapped ? b.mapped + offset : nullptr;
  a.address = b.address != 0 ? b.address + offset : 0;
  a.block = found;
  a.staging = staging;
  a.dedicated = b.dedicated;
  return a;
}

void Allocator::release_kept() {
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    Block& b = blocks_[i];
    if (b.memory != VK_NULL_HANDLE && b.kept) release_block(static_cast<int>(i));
  }
  kept_ = 0;
}

Allocation Allocator::allocate(std::size_t nbytes, const std::string& what) {
  const auto& caps = ctx_.caps();
  const auto range = caps.max_storage_buffer_range;
  if (range > 0 && nbytes > range && !caps.buffer_device_address) {
    throw OutOfMemoryError(detail::str_cat(
        "[vulkan] ", what, " is ", mib(nbytes), ", more than one storage buffer can "
        "address on ", ctx_.device().to_string(), " (maxStorageBufferRange = ",
        mib(range), ") and the device has no bufferDeviceAddress to reach past it; "
        "split the array or use the cpu device"));
  }
  return allocate_in(false, nbytes, what);
}

Allocation Allocator::allocate_staging(std::size_t nbytes) {
  return allocate_in(true, nbytes, "a staging buffer");
}

void Allocator::free(const Allocation& a) {
  if (a.block < 0) return;
  std::lock_guard lock(mu_);
  Block& b = blocks_[static_cast<std::size_t>(a.block)];
  b.used -= a.size;
  if (!a.staging) in_use_ -= a.size;
  if (b.used == 0 && kept_ + b.size <= max_kept_) {
    kept_ += b.size;  // kept for reuse (a dedicated one by an array of its size)
    b.kept = true;
    if (!b.dedicated) {
      b.free.clear();
      b.free.emplace(0, b.size);
    }
    return;
  }
  if (b.dedicated || b.used == 0) {
    // Keep one empty regular block per kind for reuse; release the rest.
    bool keep = !b.dedicated;
    if (keep) {
      for (std::size_t i = 0; i < blocks_.size(); ++i) {
        const Block& o = blocks_[i];
        if (static_cast<int>(i) != a.block && o.memory != VK_NULL_HANDLE &&
            !o.dedicated && o.staging == b.staging && o.used == 0) {
          keep = false;
        }
      }
    }
    if (!keep) {
      release_block(a.block);
      return;
    }
    b.free.clear();
    b.free.emplace(0, b.size);
    return;
  }
  auto [it, inserted] = b.free.emplace(a.offset, a.size);
  (void)inserted;
  auto next = std::next(it);
  if (next != b.free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    b.free.erase(next);
  }
  if (it != b.free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      b.free.erase(it);
    }
  }
}

std::size_t Allocator::bytes_in_use() const {
  std::lock_guard lock(mu_);
  return in_use_;
}
std::size_t Allocator::peak_bytes() const {
  std::lock_guard lock(mu_);
  return peak_;
}
void Allocator::reset_peak() {
  std::lock_guard lock(mu_);
  peak_ = in_use_;
}

VulkanBuffer::VulkanBuffer(Context& ctx, Allocation a, std::size_t nbytes)
    : ctx_(ctx), alloc_(a), nbytes_(nbytes) {
  ctx_.live_buffers().fetch_add(1, std::memory_order_relaxed);
}

VulkanBuffer::~VulkanBuffer() {
  ctx_.stream().release(alloc_, last_use_);
  ctx_.live_buffers().fetch_sub(1, std::memory_order_relaxed);
}

Device VulkanBuffer::device() const { return ctx_.device(); }

void VulkanBuffer::read(void* dst) const { ctx_.stream().read(*this, dst); }

}  // namespace kiln::vk
