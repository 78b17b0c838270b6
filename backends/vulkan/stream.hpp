// The command stream of one device: eager ops record their dispatches into an
// open command buffer (a batch) that is submitted when a value is read, when it
// holds enough work, or on synchronize(). A batch keeps every buffer it touches
// alive until its fence signals, so an array can be dropped by the caller while
// the device still uses it. Validation messages surface here as DeviceError.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "kiln/backends/vulkan/memory.hpp"

namespace kiln::vk {

class Context;
struct Pipeline;

// Most storage buffers one dispatch binds (the device may allow fewer:
// Capabilities::max_bindings).
inline constexpr std::uint32_t kMaxBindings = 32;

struct BufferRange {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize range = 0;
};
BufferRange range_of(const VulkanBuffer& b);

class Stream {
 public:
  explicit Stream(Context& ctx);
  ~Stream();

  // Records one dispatch; `keep` are the buffers it reads or writes.
  void dispatch(const Pipeline& p, std::span<const BufferRange> bindings,
                std::span<const std::uint32_t> push, std::array<std::uint32_t, 3> groups,
                std::vector<std::shared_ptr<const Buffer>> keep);
  // Host bytes -> a fresh array buffer (mapped write or a staged copy).
  void upload(const VulkanBuffer& dst, const void* src);
  // Array buffer -> host bytes; waits for the work that produces it.
  void read(const VulkanBuffer& src, void* dst);
  void flush();
  void synchronize();
  std::size_t submits() const { return submits_; }
  std::size_t dispatches() const { return dispatch_count_; }

 private:
  struct Batch {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    std::vector<std::shared_ptr<const Buffer>> keep;
    std::vector<Allocation> staging;
    std::uint32_t dispatches = 0;
  };
  Batch& open();  // the batch being recorded (begins one if needed)
  void submit_locked();
  void wait_locked(bool all);
  void retire(Batch& b);
  void check_messages();
  void barrier(VkCommandBuffer cmd);

  Context& ctx_;
  std::recursive_mutex mu_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::unique_ptr<Batch> recording_;
  std::deque<std::unique_ptr<Batch>> in_flight_;
  std::vector<std::unique_ptr<Batch>> spare_;
  PFN_vkCmdPushDescriptorSetKHR push_descriptor_ = nullptr;
  std::size_t submits_ = 0, dispatch_count_ = 0;
};

}  // namespace kiln::vk
