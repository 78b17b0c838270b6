// Device memory: arrays are suballocated from large VkDeviceMemory blocks (each
// with one VkBuffer over the whole block), aligned per the device limits. Where
// device memory is host-visible on a unified-memory device it is mapped and
// written directly; otherwise transfers go through host-visible staging blocks.
#pragma once

#include <vulkan/vulkan.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/runtime/buffer.hpp"

namespace kiln::vk {

class Context;

struct Allocation {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize size = 0;   // bytes reserved (>= requested, aligned)
  std::byte* mapped = nullptr;  // host address of `offset`, or null
  VkDeviceAddress address = 0;  // device address of `offset` (bufferDeviceAddress), or 0
  int block = -1;
  bool staging = false;
  bool dedicated = false;  // the whole of a block of its own
};

class Allocator {
 public:
  explicit Allocator(Context& ctx);
  ~Allocator();
  // Device memory for an array of `nbytes`. Throws OutOfMemoryError (naming `what`,
  // the size and the heap) when the heap is exhausted.
  Allocation allocate(std::size_t nbytes, const std::string& what);
  // Host-visible memory for transfers.
  Allocation allocate_staging(std::size_t nbytes);
  // The bytes allocate(nbytes) reserves, and whether they get a dedicated block.
  VkDeviceSize reserved_size(std::size_t nbytes) const;
  bool dedicated_size(VkDeviceSize reserved) const { return reserved > block_size_ / 2; }
  void free(const Allocation& a);
  // True when arrays are mapped directly (no staging copies).
  bool direct() const { return direct_; }
  std::size_t bytes_in_use() const;
  std::size_t peak_bytes() const;
  void reset_peak();
  std::size_t heap_size() const { return heap_size_; }

 private:
  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize size = 0;
    std::byte* mapped = nullptr;
    VkDeviceAddress address = 0;
    bool staging = false;
    bool dedicated = false;
    std::map<VkDeviceSize, VkDeviceSize> free;  // offset -> size, coalesced
    VkDeviceSize used = 0;
    bool kept = false;  // empty, kept for reuse (counted in kept_)
  };
  Allocation allocate_in(bool staging, std::size_t nbytes, const std::string& what);
  int new_block(bool staging, VkDeviceSize size, bool dedicated, const std::string& what);
  void release_block(int index);
  void release_kept();  // frees the kept empty blocks

  Context& ctx_;
  mutable std::mutex mu_;
  std::vector<Block> blocks_;
  std::uint32_t device_type_ = 0, staging_type_ = 0;
  bool direct_ = false;
  VkDeviceSize alignment_ = 256;
  VkDeviceSize block_size_ = 64ull << 20;
  std::size_t heap_size_ = 0, heap_used_ = 0, in_use_ = 0, peak_ = 0, kept_ = 0;
  std::size_t max_kept_ = 0;  // bytes of empty blocks kept for reuse, at most
};

// The storage of one array on a Vulkan device. When it dies its memory goes to the
// stream (Stream::release), which returns it to the allocator once the commands
// that use it have finished.
class VulkanBuffer final : public Buffer {
 public:
  VulkanBuffer(Context& ctx, Allocation a, std::size_t nbytes);
  ~VulkanBuffer() override;
  VulkanBuffer(const VulkanBuffer&) = delete;
  VulkanBuffer& operator=(const VulkanBuffer&) = delete;

  Device device() const override;
  std::size_t nbytes() const override { return nbytes_; }
  void read(void* dst) const override;
  const Allocation& allocation() const { return alloc_; }
  Context& context() const { return ctx_; }
  // The serial of the last batch with a command using it (0: none); set by the
  // stream under its lock when it records one.
  std::uint64_t last_use() const { return last_use_; }
  void set_last_use(std::uint64_t serial) const { last_use_ = serial; }

 private:
  Context& ctx_;
  Allocation alloc_;
  std::size_t nbytes_;
  mutable std::uint64_t last_use_ = 0;
};

}  // namespace kiln::vk
