// Batching, barriers, descriptor sets, fences and transfers.
#include "kiln/backends/vulkan/stream.hpp"

#include <cstring>

#include "kiln/backends/vulkan/check.hpp"
#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/pipeline.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {
constexpr std::uint32_t kMaxDispatchesPerBatch = 64;
}  // namespace

BufferRange range_of(const VulkanBuffer& b) {
  const Allocation& a = b.allocation();
  return {a.buffer, a.offset, a.size};
}

Stream::Stream(Context& ctx) : ctx_(ctx) {
  VkCommandPoolCreateInfo ci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  ci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  ci.queueFamilyIndex = ctx.queue_family();
  KILN_VK(vkCreateCommandPool(ctx.handle(), &ci, nullptr, &pool_));
  if (ctx.caps().push_descriptor) {
    push_descriptor_ = reinterpret_cast<PFN_vkCmdPushDescriptorSetKHR>(
        vkGetDeviceProcAddr(ctx.handle(), "vkCmdPushDescriptorSetKHR"));
  }
}

Stream::~Stream() = default;  // lives until process exit

void Stream::check_messages() {
  if (!validation_enabled()) return;
  auto msgs = take_validation_messages();
  if (!msgs.empty()) {
    throw DeviceError(detail::str_cat("[vulkan] validation layer reported ",
                                      msgs.size(), " message(s); first: ", msgs[0]));
  }
}

Stream::Batch& Stream::open() {
  if (recording_) return *recording_;
  std::unique_ptr<Batch> b;
  if (!spare_.empty()) {
    b = std::move(spare_.back());
    spare_.pop_back();
  } else {
    b = std::make_unique<Batch>();
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    KILN_VK(vkAllocateCommandBuffers(ctx_.handle(), &ai, &b->cmd));
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    KILN_VK(vkCreateFence(ctx_.handle(), &fi, nullptr, &b->fence));
    if (!push_descriptor_) {
      VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                kMaxDispatchesPerBatch * kMaxBindings};
      VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
      pi.maxSets = kMaxDispatchesPerBatch;
      pi.poolSizeCount = 1;
      pi.pPoolSizes = &size;
      KILN_VK(vkCreateDescriptorPool(ctx_.handle(), &pi, nullptr, &b->pool));
    }
  }
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  KILN_VK(vkBeginCommandBuffer(b->cmd, &bi));
  recording_ = std::move(b);
  return *recording_;
}

// Everything before (dispatches, copies, host writes at submit) happens before
// everything after. The fused-program path (filter_jit) will place only the
// barriers its dependencies need; eager ops take this conservative one.
void Stream::barrier(VkCommandBuffer cmd) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                     VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vkCmdPipelineBarrier(cmd, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

void Stream::dispatch(const Pipeline& p, std::span<const BufferRange> bindings,
                      std::span<const std::uint32_t> push,
                      std::array<std::uint32_t, 3> groups,
                      std::vector<std::shared_ptr<const Buffer>> keep) {
  std::lock_guard lock(mu_);
  Batch& b = open();
  barrier(b.cmd);
  vkCmdBindPipeline(b.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  std::array<VkDescriptorBufferInfo, kMaxBindings> infos{};
  std::array<VkWriteDescriptorSet, kMaxBindings> writes{};
  for (std::size_t i = 0; i < bindings.size(); ++i) {
    infos[i] = {bindings[i].buffer, bindings[i].offset, bindings[i].range};
    writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[i].dstBinding = static_cast<std::uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  const auto n = static_cast<std::uint32_t>(bindings.size());
  if (push_descriptor_) {
    push_descriptor_(b.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, n,
                     writes.data());
  } else {
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = b.pool;
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &p.set_layout;
    VkDescriptorSet set;
    KILN_VK(vkAllocateDescriptorSets(ctx_.handle(), &ai, &set));
    for (std::uint32_t i = 0; i < n; ++i) writes[i].dstSet = set;
    vkUpdateDescriptorSets(ctx_.handle(), n, writes.data(), 0, nullptr);
    vkCmdBindDescriptorSets(b.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1,
                            &set, 0, nullptr);
  }
  if (!push.empty()) {
    vkCmdPushConstants(b.cmd, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                       static_cast<std::uint32_t>(push.size() * 4), push.data());
  }
  vkCmdDispatch(b.cmd, groups[0], groups[1], groups[2]);
  for (auto& k : keep) b.keep.push_back(std::move(k));
  ++dispatch_count_;
  if (++b.dispatches >= kMaxDispatchesPerBatch) submit_locked();
}

void Stream::upload(const VulkanBuffer& dst, const void* src) {
  const Allocation& a = dst.allocation();
  if (dst.nbytes() == 0) return;
  if (a.mapped != nullptr) {  // fresh memory: no pending work can touch it
    std::memcpy(a.mapped, src, dst.nbytes());
    return;
  }
  std::lock_guard lock(mu_);
  Allocation s = ctx_.allocator().allocate_staging(dst.nbytes());
  std::memcpy(s.mapped, src, dst.nbytes());
  Batch& b = open();
  barrier(b.cmd);
  VkBufferCopy region{s.offset, a.offset, dst.nbytes()};
  vkCmdCopyBuffer(b.cmd, s.buffer, a.buffer, 1, &region);
  b.staging.push_back(s);
}

void Stream::read(const VulkanBuffer& src, void* dst) {
  std::lock_guard lock(mu_);
  const Allocation& a = src.allocation();
  if (src.nbytes() == 0) return;
  if (a.mapped != nullptr) {
    if (recording_) submit_locked();
    wait_locked(true);
    std::memcpy(dst, a.mapped, src.nbytes());
    return;
  }
  Allocation s = ctx_.allocator().allocate_staging(src.nbytes());
  Batch& b = open();
  barrier(b.cmd);
  VkBufferCopy region{a.offset, s.offset, src.nbytes()};
  vkCmdCopyBuffer(b.cmd, a.buffer, s.buffer, 1, &region);
  submit_locked();
  wait_locked(true);
  std::memcpy(dst, s.mapped, src.nbytes());
  ctx_.allocator().free(s);
}

void Stream::submit_locked() {
  if (!recording_) return;
  Batch& b = *recording_;
  // Make device writes visible to host reads after the fence.
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(b.cmd,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  KILN_VK(vkEndCommandBuffer(b.cmd));
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &b.cmd;
  KILN_VK(vkQueueSubmit(ctx_.queue(), 1, &si, b.fence));
  ++submits_;
  in_flight_.push_back(std::move(recording_));
  // Retire what already finished, so memory comes back without waiting.
  while (!in_flight_.empty() &&
         vkGetFenceStatus(ctx_.handle(), in_flight_.front()->fence) == VK_SUCCESS) {
    auto done = std::move(in_flight_.front());
    in_flight_.pop_front();
    retire(*done);
    spare_.push_back(std::move(done));
  }
  check_messages();
}

void Stream::retire(Batch& b) {
  KILN_VK(vkResetFences(ctx_.handle(), 1, &b.fence));
  KILN_VK(vkResetCommandBuffer(b.cmd, 0));
  if (b.pool != VK_NULL_HANDLE) KILN_VK(vkResetDescriptorPool(ctx_.handle(), b.pool, 0));
  for (const auto& s : b.staging) ctx_.allocator().free(s);
  b.staging.clear();
  auto keep = std::move(b.keep);  // may free device memory: not under the allocator lock
  b.keep.clear();
  b.dispatches = 0;
}

void Stream::wait_locked(bool all) {
  while (!in_flight_.empty()) {
    Batch& b = *in_flight_.front();
    KILN_VK(vkWaitForFences(ctx_.handle(), 1, &b.fence, VK_TRUE, UINT64_MAX));
    auto done = std::move(in_flight_.front());
    in_flight_.pop_front();
    retire(*done);
    spare_.push_back(std::move(done));
    if (!all) break;
  }
  check_messages();
}

void Stream::flush() {
  std::lock_guard lock(mu_);
  submit_locked();
}

void Stream::synchronize() {
  std::lock_guard lock(mu_);
  submit_locked();
  wait_locked(true);
}

}  // namespace kiln::vk
