// The command stream of one device. Eager ops record their dispatches into an
// open command buffer (a batch) that is submitted when a value is read, when it
// holds 64 dispatches, or on synchronize(). Inside a program scope
// (begin_program / end_program, one compiled-program call) every dispatch goes
// into the same command buffer, without the 64-dispatch cap, and end_program
// submits it once without waiting. Barriers come from hazard tracking: a barrier
// is recorded before a command only when it reads memory written since the last
// barrier, or writes memory read or written since then. An array can be dropped
// while commands still use it: its memory then goes only to the outputs of later
// dispatches (ordered behind those commands by the same hazard tracking) until
// the batch of its last command retires, and only then back to the allocator
// (for uploads the host writes, or to release a block). Validation messages
// surface here as DeviceError.
//
// Threads: every member function may be called from any thread. One recursive
// lock orders them; a program scope holds it throughout, so a compiled call's
// command buffer holds that call's commands only.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/backends/vulkan/memory.hpp"
#include "kiln/backends/vulkan/profile.hpp"

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

// What the device has done on this stream since the process started; tests and
// benchmarks take differences.
struct StreamStats {
  std::size_t submits = 0;          // vkQueueSubmit calls (one command buffer each)
  std::size_t command_buffers = 0;  // command buffers begun
  std::size_t dispatches = 0;
  std::size_t transfers = 0;        // buffer copies (staging uploads and reads)
  std::size_t barriers = 0;         // hazard barriers between commands (not the
                                    // device -> host barrier that ends each batch)
  std::size_t reused = 0;           // outputs placed in the memory of a dead array
                                    // whose commands had not finished
};

using vulkan::KernelTime;  // profile.hpp

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

  // Records one dispatch binding `buffers` (whole arrays) in order; bit i of
  // `written` says the kernel writes buffers[i] (the others are read).
  void dispatch(const Pipeline& p, std::span<const VulkanBuffer* const> buffers,
                std::uint32_t written, std::span<const std::uint32_t> push,
                std::array<std::uint32_t, 3> groups);
  // Host bytes -> a fresh array buffer (mapped write or a staged copy).
  void upload(const VulkanBuffer& dst, const void* src);
  // The memory of a dead array (VulkanBuffer's destructor); `last_use` is the
  // serial of the last batch using it. Back to the allocator now if that batch
  // has retired, else when it does.
  void release(const Allocation& a, std::uint64_t last_use);
  // Memory of `nbytes` for the output of the next dispatch, which reads `reads`:
  // the memory of a dead array whose commands may not have finished, where
  // writing it needs no barrier the dispatch does not get anyway (with `any`,
  // whatever fits: on a shortage). nullopt when none fits. The buffer made
  // over it must start from `last_use` (VulkanBuffer::set_last_use), so that it
  // does not go back to the allocator before those commands finish even if no
  // command of its own uses it.
  struct Reused {
    Allocation alloc;
    std::uint64_t last_use = 0;
  };
  std::optional<Reused> reuse(std::size_t nbytes, std::span<const BufferRange> reads, bool any);
  // Array buffer -> host bytes; waits for the work that produces it.
  void read(const VulkanBuffer& src, void* dst);
  // One compiled-program call: see the top of this file. Calls nest; the
  // outermost end_program submits. The calling thread holds the stream from
  // begin_program to end_program (both must be called on the same thread):
  // other threads' work waits and never lands in the program's command buffer.
  void begin_program();
  void end_program();
  void flush();
  void synchronize();
  StreamStats stats() const;
  std::size_t submits() const { return stats().submits; }
  // Kernel profile (profile.hpp): while on, each command buffer writes a GPU
  // timestamp when it starts and after every dispatch and copy; when it
  // retires, the difference to the previous timestamp is added to the
  // command's kind. No effect on a queue without timestamps
  // (Capabilities::timestamp_period == 0).
  void set_profiling(bool on);
  bool profiling() const;
  // By device time, largest first.
  std::vector<KernelTime> profile() const;
  void reset_profile();
  // Command buffers the profile covers (a compiled program's call is one).
  std::size_t profiled_batches() const;
  // The profile as a table (to stderr at exit under KILN_VK_PROFILE=1) or JSON.
  std::string profile_report(bool json) const;
  std::size_t dispatches() const { return stats().dispatches; }

  // Checks that run on the device (index_check_kernel): a compiled program's
  // gathers and scatters check their indices without a host round trip. Each
  // check gets a slot: two u32 of host-visible memory (a buffer of its own, so
  // its binding is small on any device), zeroed here; a kernel that finds a
  // fault writes 1 and the faulty value there. When the slot's batch retires, a
  // fault becomes IndexError(message(value)), thrown by the next
  // synchronisation (synchronize, a read): the call that faulted has returned by
  // then, as in JAX's asynchronous dispatch. Null when every slot is taken by
  // the batch being recorded (the caller checks on the host).
  std::shared_ptr<VulkanBuffer> add_check(std::function<std::string(std::uint32_t)> message);
  static constexpr std::uint32_t kFaultSlots = 1024;
  // The stream's own buffers (the check slots made so far): not arrays a user
  // holds (release_external_device counts live arrays).
  std::size_t own_buffers() const;
  // Frees them; Context::~Context calls it while the context still holds the
  // stream (a buffer's destructor hands its memory back through it).
  void drop_own_buffers();

 private:
  struct Batch {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    // Without push descriptors: descriptor pools of kSetsPerPool sets, more
    // created as a long batch needs them; `pool` is the one in use.
    std::vector<VkDescriptorPool> pools;
    std::size_t pool = 0;
    std::uint32_t sets_in_pool = 0;
    std::vector<Allocation> staging;
    std::vector<VkBufferView> views;  // texel-buffer views its dispatches bind
    // The pipelines its dispatches use, kept alive until it retires (the
    // pipeline cache may evict them meanwhile).
    std::vector<std::shared_ptr<const Pipeline>> pipelines;
    std::uint32_t dispatches = 0;
    std::uint64_t serial = 0;  // 1, 2, ... in the order batches are begun (= submitted)
    // Profiling: timestamp 0 starts the batch, timestamp i + 1 follows the
    // command of kind stamps[i].
    VkQueryPool queries = VK_NULL_HANDLE;
    bool timed = false;
    std::vector<std::string> stamps;
    // Device-side checks recorded in it: slot and message.
    std::vector<std::pair<std::uint32_t, std::function<std::string(std::uint32_t)>>> checks;
  };
  struct Deferred {
    Allocation alloc;
    std::uint64_t serial = 0;  // its last batch
  };
  Batch& open();  // the batch being recorded (begins one if needed)
  void retire_oldest();  // waits for the oldest batch in flight and retires it
  VkDescriptorSet allocate_set(Batch& b, const Pipeline& p);
  void submit_locked();
  void wait_locked(bool all);
  void retire(Batch& b);
  void check_messages();
  void stamp(Batch& b, std::string_view kind);
  void collect_profile(Batch& b);
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
  std::uint64_t next_serial_ = 1;
  std::uint64_t retired_serial_ = 0;  // every batch up to this one has retired
  std::vector<Deferred> deferred_;    // memory of dead arrays, by last batch
  StreamStats stats_;
  bool profiling_ = false;
  std::vector<KernelTime> profile_;  // by first appearance
  std::size_t profiled_batches_ = 0;
  std::vector<std::shared_ptr<VulkanBuffer>> faults_;  // per slot: 2 u32, mapped
  std::vector<std::uint64_t> fault_owner_;      // per slot: the batch that last used it
  std::uint32_t next_fault_ = 0;
  std::optional<std::string> fault_;            // thrown by the next synchronisation
};

}  // namespace kiln::vk
