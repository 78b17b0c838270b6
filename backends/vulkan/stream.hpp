// The command stream of one device. Eager ops record their dispatches into an
// open command buffer (a batch) that is submitted when a value is read, when it
// holds 64 dispatches, or on synchronize(). Inside a program scope
// (begin_program / end_program, one compiled-program call) every dispatch goes
// into the same command buffer, without the 64-dispatch cap, and end_program
// submits it once without waiting. Barriers come from hazard tracking: a barrier
// is recorded before a command only when it reads memory written since the last
// barrier, or writes memory read or written since then. A batch keeps every
// buffer it touches alive until its fence signals, so an array can be dropped by
// the caller while the device still uses it. Validation messages surface here as
// DeviceError.
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

struct BufferRange {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize range = 0;
};
BufferRange range_of(const VulkanBuffer& b);

// What the device has done on this stream since the process started; tests and
// benchmarks take differences.
struct StreamStats {
  std::size_t submits = 0;          // vkQueueSubmit calls (one command buffer each)
  std::size_t command_buffers = 0;  // command buffers begun
  std::size_t dispatches = 0;
  std::size_t transfers = 0;        // buffer copies (staging uploads and reads)
  std::size_t barriers = 0;         // hazard barriers between commands (not the
                                    // device -> host barrier that ends each batch)
};

// Memory accesses recorded since the last barrier, as byte ranges of VkBuffers.
// Ranges, not handles: arrays are suballocated from shared blocks, so two arrays
// (or an array and the memory a dead one left) can live in one VkBuffer.
class HazardTracker {
 public:
  struct Access {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize begin = 0, end = 0;  // bytes [begin, end)
    bool write = false;
  };
  // True when `a` must wait for an access since the last barrier: it reads what
  // one wrote (RAW), or writes what one read or wrote (WAR, WAW).
  bool conflicts(const Access& a) const;
  void add(const Access& a, VkPipelineStageFlags stage, VkAccessFlags access);
  bool empty() const { return accesses_.empty(); }
  void clear();
  // Stages and write accesses since the last barrier (its source scopes).
  VkPipelineStageFlags stages() const { return stages_; }
  VkAccessFlags writes() const { return writes_; }

 private:
  std::vector<Access> accesses_;
  VkPipelineStageFlags stages_ = 0;
  VkAccessFlags writes_ = 0;
};

class Stream {
 public:
  explicit Stream(Context& ctx);
  ~Stream();

  // Records one dispatch; bit i of `written` says the kernel writes bindings[i]
  // (the others are read). `keep` are the buffers it reads or writes.
  void dispatch(const Pipeline& p, std::span<const BufferRange> bindings,
                std::uint32_t written, std::span<const std::uint32_t> push,
                std::array<std::uint32_t, 3> groups,
                std::vector<std::shared_ptr<const Buffer>> keep);
  // Host bytes -> a fresh array buffer (mapped write or a staged copy).
  void upload(const std::shared_ptr<const VulkanBuffer>& dst, const void* src);
  // Array buffer -> host bytes; waits for the work that produces it.
  void read(const VulkanBuffer& src, void* dst);
  // One compiled-program call: see the top of this file. Calls nest; the
  // outermost end_program submits.
  void begin_program();
  void end_program();
  void flush();
  void synchronize();
  StreamStats stats() const;
  std::size_t submits() const { return stats().submits; }
  std::size_t dispatches() const { return stats().dispatches; }

 private:
  struct Batch {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    // Without push descriptors: descriptor pools of kSetsPerPool sets, more
    // created as a long batch needs them; `pool` is the one in use.
    std::vector<VkDescriptorPool> pools;
    std::size_t pool = 0;
    std::uint32_t sets_in_pool = 0;
    std::vector<std::shared_ptr<const Buffer>> keep;
    std::vector<Allocation> staging;
    std::uint32_t dispatches = 0;
  };
  Batch& open();  // the batch being recorded (begins one if needed)
  VkDescriptorSet allocate_set(Batch& b, const Pipeline& p);
  void submit_locked();
  void wait_locked(bool all);
  void retire(Batch& b);
  void check_messages();
  // Records a barrier first if `accesses` conflict with what came since the last
  // one, then notes them as done at `stage`.
  void order(VkCommandBuffer cmd, std::span<const HazardTracker::Access> accesses,
             VkPipelineStageFlags stage, VkAccessFlags read_access,
             VkAccessFlags write_access);

  Context& ctx_;
  mutable std::recursive_mutex mu_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::unique_ptr<Batch> recording_;
  std::deque<std::unique_ptr<Batch>> in_flight_;
  std::vector<std::unique_ptr<Batch>> spare_;
  PFN_vkCmdPushDescriptorSetKHR push_descriptor_ = nullptr;
  // Not cleared when batches finish: a fence wait orders the host after the
  // device, not later device work after earlier device work, so a hazard with
  // a command of an earlier submission still gets a barrier (whose first scope
  // covers every command submitted before it).
  HazardTracker hazards_;
  VkPipelineStageFlags later_stages_ = 0;  // what a barrier's second scope covers
  VkAccessFlags later_access_ = 0;
  int program_depth_ = 0;
  StreamStats stats_;
};

}  // namespace kiln::vk
