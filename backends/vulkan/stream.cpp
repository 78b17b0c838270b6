// Batching, program scopes, hazard-tracked barriers, descriptor sets, fences and
// transfers.
#include "kiln/backends/vulkan/stream.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "kiln/backends/vulkan/check.hpp"
#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/pipeline.hpp"
#include "kiln/backends/vulkan/spirv.hpp"
#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {
constexpr std::uint32_t kMaxDispatchesPerBatch = 64;  // outside a program scope
constexpr std::uint32_t kSetsPerPool = 64;
// Timestamps a profiled batch can hold; later commands in it go untimed.
constexpr std::uint32_t kQueriesPerBatch = 8192;

// Streams whose profile KILN_VK_PROFILE reports at exit (contexts live until then).
std::mutex g_profiled_mu;
std::vector<const Stream*>& profiled_streams() {
  static auto* v = new std::vector<const Stream*>();
  return *v;
}
void report_profiles_at_exit() {
  const std::optional<std::string> where = detail::env::text("KILN_VK_PROFILE");
  std::lock_guard lock(g_profiled_mu);
  const bool to_stderr = !where || *where == "1";
  std::string json = "[";
  for (const Stream* s : profiled_streams()) {
    if (to_stderr) {
      std::fputs(s->profile_report(false).c_str(), stderr);
    } else {
      json += (json.size() > 1 ? ",\n" : "") + s->profile_report(true);
    }
  }
  if (to_stderr) return;
  json += "]\n";
  if (std::FILE* f = std::fopen(where->c_str(), "w")) {
    std::fputs(json.c_str(), f);
    std::fclose(f);
  } else {
    std::fprintf(stderr, "kiln: KILN_VK_PROFILE: cannot write %s\n", where->c_str());
  }
}
}  // namespace

BufferRange range_of(const VulkanBuffer& b) {
  const Allocation& a = b.allocation();
  return {a.buffer, a.offset, a.size};
}

bool HazardTracker::conflicts(const Access& a) const {
  for (const Access& x : accesses_) {
    if (x.buffer == a.buffer && a.begin < x.end && x.begin < a.end && (a.write || x.write)) {
      return true;
    }
  }
  return false;
}

void HazardTracker::add(const Access& a, VkPipelineStageFlags stage, VkAccessFlags access) {
  stages_ |= stage;
  if (a.write) writes_ |= access;
  for (const Access& x : accesses_) {  // an input read by many commands: note it once
    if (x.buffer == a.buffer && x.begin == a.begin && x.end == a.end && x.write == a.write) {
      return;
    }
  }
  accesses_.push_back(a);
}

void HazardTracker::clear() {
  accesses_.clear();
  stages_ = 0;
  writes_ = 0;
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
  // A barrier orders what came before it with every kind of command that can
  // follow: dispatches, and copies where arrays go through staging buffers.
  later_stages_ = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
  later_access_ = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  if (!ctx.allocator().direct()) {
    later_stages_ |= VK_PIPELINE_STAGE_TRANSFER_BIT;
    later_access_ |= VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  }
  if (const auto p = detail::env::text("KILN_VK_PROFILE"); p && *p != "0") {
    set_profiling(true);
    std::lock_guard lock(g_profiled_mu);
    if (profiled_streams().empty()) std::atexit(report_profiles_at_exit);
    profiled_streams().push_back(this);
  }
}

// Only for a released device (Context::~Context), after synchronize(): no batch
// is recording or in flight.
Stream::~Stream() {
  {
    std::lock_guard lock(g_profiled_mu);
    auto& v = profiled_streams();
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }
  const VkDevice dev = ctx_.handle();
  auto destroy = [&](Batch& b) {
    vkDestroyFence(dev, b.fence, nullptr);
    if (b.queries != VK_NULL_HANDLE) vkDestroyQueryPool(dev, b.queries, nullptr);
    for (VkDescriptorPool p : b.pools) vkDestroyDescriptorPool(dev, p, nullptr);
    for (const auto& s : b.staging) ctx_.allocator().free(s);
  };
  if (recording_) destroy(*recording_);
  for (auto& b : in_flight_) destroy(*b);
  for (auto& b : spare_) destroy(*b);
  for (const Deferred& d : deferred_) ctx_.allocator().free(d.alloc);
  vkDestroyCommandPool(dev, pool_, nullptr);  // frees the command buffers
}

void Stream::check_messages() {
  if (!validation_enabled()) return;
  auto msgs = take_validation_messages();
  if (!msgs.empty()) {
    throw DeviceError(detail::str_cat("[vulkan] validation layer reported ",
                                      msgs.size(), " message(s); first: ", msgs[0]));
  }
}

Stream::Batch& Stream::open() {
  check_not_forked();
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
  }
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  KILN_VK(vkBeginCommandBuffer(b->cmd, &bi));
  b->serial = next_serial_++;
  b->timed = profiling_;
  b->stamps.clear();
  if (b->timed) {
    if (b->queries == VK_NULL_HANDLE) {
      VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = kQueriesPerBatch;
      KILN_VK(vkCreateQueryPool(ctx_.handle(), &qi, nullptr, &b->queries));
    }
    vkCmdResetQueryPool(b->cmd, b->queries, 0, kQueriesPerBatch);
    vkCmdWriteTimestamp(b->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, b->queries, 0);
  }
  ++stats_.command_buffers;
  recording_ = std::move(b);
  return *recording_;
}

VkDescriptorSet Stream::allocate_set(Batch& b, const Pipeline& p) {
  if (b.pools.empty() || b.sets_in_pool == kSetsPerPool) {
    if (!b.pools.empty()) ++b.pool;
    if (b.pool == b.pools.size()) {
      const VkDescriptorPoolSize sizes[] = {
          {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kMaxBindings},
          {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, kSetsPerPool * kMaxBindings}};
      VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
      pi.maxSets = kSetsPerPool;
      pi.poolSizeCount = ctx_.caps().texel_loads ? 2 : 1;
      pi.pPoolSizes = sizes;
      VkDescriptorPool pool = VK_NULL_HANDLE;
      KILN_VK(vkCreateDescriptorPool(ctx_.handle(), &pi, nullptr, &pool));
      b.pools.push_back(pool);
    }
    b.sets_in_pool = 0;
  }
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = b.pools[b.pool];
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &p.set_layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  KILN_VK(vkAllocateDescriptorSets(ctx_.handle(), &ai, &set));
  ++b.sets_in_pool;
  return set;
}

// Hazard tracking replaces a barrier before every command: independent
// dispatches of a program run without one between them, and a chain gets one
// per dependency. The barrier is global (VkMemoryBarrier): its source scope is
// the stages and writes since the last barrier, its destination every stage a
// later command can use, so after it nothing recorded before needs tracking.
void Stream::order(VkCommandBuffer cmd, std::span<const HazardTracker::Access> accesses,
                   VkPipelineStageFlags stage, VkAccessFlags read_access,
                   VkAccessFlags write_access) {
  bool hazard = false;
  for (const auto& a : accesses) hazard = hazard || hazards_.conflicts(a);
  if (hazard) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = hazards_.writes();
    mb.dstAccessMask = later_access_;
    vkCmdPipelineBarrier(cmd, hazards_.stages(), later_stages_ | stage, 0, 1, &mb, 0,
                         nullptr, 0, nullptr);
    ++stats_.barriers;
    hazards_.clear();
  }
  for (const auto& a : accesses) hazards_.add(a, stage, a.write ? write_access : read_access);
}

void Stream::dispatch(const Pipeline& p, std::span<const VulkanBuffer* const> buffers,
                      std::uint32_t written, std::span<const std::uint32_t> push,
                      std::array<std::uint32_t, 3> groups) {
  std::lock_guard lock(mu_);
  if (buffers.size() > kMaxBindings) {
    throw Error(detail::str_cat("[vulkan] a kernel binds ", buffers.size(),
                                " buffers; the stream supports ", kMaxBindings));
  }
  Batch& b = open();
  std::array<BufferRange, kMaxBindings> bindings_store{};
  std::array<HazardTracker::Access, kMaxBindings> accesses{};
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const BufferRange r = range_of(*buffers[i]);
    bindings_store[i] = r;
    accesses[i] = {r.buffer, r.offset, r.offset + r.range, ((written >> i) & 1u) != 0};
    buffers[i]->set_last_use(b.serial);
  }
  const std::span<const BufferRange> bindings(bindings_store.data(), buffers.size());
  order(b.cmd, std::span(accesses.data(), bindings.size()),
        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT,
        VK_ACCESS_SHADER_WRITE_BIT);
  vkCmdBindPipeline(b.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  if (b.pipelines.empty() || b.pipelines.back().get() != &p) {
    b.pipelines.push_back(p.shared_from_this());
  }
  std::array<VkDescriptorBufferInfo, kMaxBindings> infos{};
  std::array<VkBufferView, kMaxBindings> views{};
  std::array<VkWriteDescriptorSet, kMaxBindings> writes{};
  for (std::size_t i = 0; i < bindings.size(); ++i) {
    writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[i].dstBinding = static_cast<std::uint32_t>(i);
    writes[i].descriptorCount = 1;
    if (((p.texel >> i) & 1u) != 0) {
      // A view of the whole texels of the array (16-byte R32G32B32A32 texels),
      // destroyed when the batch retires.
      VkBufferViewCreateInfo vi{VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO};
      vi.buffer = bindings[i].buffer;
      vi.format = p.texel_format;
      vi.offset = bindings[i].offset;
      vi.range = bindings[i].range / 16 * 16;
      KILN_VK(vkCreateBufferView(ctx_.handle(), &vi, nullptr, &views[i]));
      b.views.push_back(views[i]);
      writes[i].descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
      writes[i].pTexelBufferView = &views[i];
    } else {
      // An addressed binding's descriptor goes unused: it covers what one can.
      infos[i] = {bindings[i].buffer, bindings[i].offset,
                  std::min<VkDeviceSize>(bindings[i].range, ctx_.caps().max_storage_buffer_range)};
      writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[i].pBufferInfo = &infos[i];
    }
  }
  const auto n = static_cast<std::uint32_t>(bindings.size());
  if (push_descriptor_) {
    push_descriptor_(b.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, n,
                     writes.data());
  } else {
    VkDescriptorSet set = allocate_set(b, p);
    for (std::uint32_t i = 0; i < n; ++i) writes[i].dstSet = set;
    vkUpdateDescriptorSets(ctx_.handle(), n, writes.data(), 0, nullptr);
    vkCmdBindDescriptorSets(b.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1,
                            &set, 0, nullptr);
  }
  // Addressed bindings: their device addresses after the kernel's own words.
  std::array<std::uint32_t, 64> words{};
  if (p.addressed != 0) {
    std::copy(push.begin(), push.end(), words.begin());
    std::size_t w = spv::address_word(static_cast<std::uint32_t>(push.size()));
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      if (((p.addressed >> i) & 1u) == 0) continue;
      const VkDeviceAddress a = buffers[i]->allocation().address;
      if (a == 0 || w + 2 > words.size()) {
        throw Error(detail::str_cat("[vulkan] kernel binding ", i, " needs a device address"));
      }
      words[w++] = static_cast<std::uint32_t>(a);
      words[w++] = static_cast<std::uint32_t>(a >> 32);
    }
    push = std::span<const std::uint32_t>(words.data(), w);
  }
  if (!push.empty()) {
    vkCmdPushConstants(b.cmd, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                       static_cast<std::uint32_t>(push.size() * 4), push.data());
  }
  vkCmdDispatch(b.cmd, groups[0], groups[1], groups[2]);
  if (b.timed) stamp(b, p.kind);
  ++stats_.dispatches;
  ++b.dispatches;
  if (program_depth_ == 0 && b.dispatches >= kMaxDispatchesPerBatch) submit_locked();
}

void Stream::upload(const VulkanBuffer& dst, const void* src) {
  check_not_forked();
  const Allocation& a = dst.allocation();
  const std::size_t bytes = dst.nbytes();
  if (bytes == 0) return;
  if (a.mapped != nullptr) {
    // Fresh memory from the allocator: whatever used it before has retired (its
    // batch's fence was seen; see release), and a host write before vkQueueSubmit
    // is visible to the commands submitted.
    std::memcpy(a.mapped, src, bytes);
    return;
  }
  std::lock_guard lock(mu_);
  Allocation s = ctx_.allocator().allocate_staging(bytes);
  std::memcpy(s.mapped, src, bytes);
  Batch& b = open();
  const HazardTracker::Access accesses[] = {{s.buffer, s.offset, s.offset + s.size, false},
                                            {a.buffer, a.offset, a.offset + a.size, true}};
  order(b.cmd, accesses, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT,
        VK_ACCESS_TRANSFER_WRITE_BIT);
  VkBufferCopy region{s.offset, a.offset, bytes};
  vkCmdCopyBuffer(b.cmd, s.buffer, a.buffer, 1, &region);
  if (b.timed) stamp(b, "copy (upload)");
  ++stats_.transfers;
  b.staging.push_back(s);
  dst.set_last_use(b.serial);
}

void Stream::read(const VulkanBuffer& src, void* dst) {
  check_not_forked();
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
  const HazardTracker::Access accesses[] = {{a.buffer, a.offset, a.offset + a.size, false},
                                            {s.buffer, s.offset, s.offset + s.size, true}};
  order(b.cmd, accesses, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT,
        VK_ACCESS_TRANSFER_WRITE_BIT);
  VkBufferCopy region{a.offset, s.offset, src.nbytes()};
  vkCmdCopyBuffer(b.cmd, a.buffer, s.buffer, 1, &region);
  if (b.timed) stamp(b, "copy (read)");
  ++stats_.transfers;
  src.set_last_use(b.serial);
  submit_locked();
  wait_locked(true);
  std::memcpy(dst, s.mapped, src.nbytes());
  ctx_.allocator().free(s);
}

void Stream::release(const Allocation& a, std::uint64_t last_use) {
  if (a.block < 0) return;
  {
    std::lock_guard lock(mu_);
    if (last_use > retired_serial_) {
      deferred_.push_back({a, last_use});
      return;
    }
  }
  ctx_.allocator().free(a);
}

// Reusing memory inside a command buffer keeps a long program's footprint at its
// live set (intermediates die after their last use) instead of the sum of all
// its intermediates. The hazard tracker orders the new writes after the dead
// array's commands whatever is picked here; the choice only avoids adding a
// barrier: memory whose commands are behind the last barrier, or any memory when
// the dispatch reads something written since the last barrier (a RAW barrier
// comes anyway).
std::optional<Stream::Reused> Stream::reuse(std::size_t nbytes,
                                            std::span<const BufferRange> reads, bool any) {
  std::lock_guard lock(mu_);
  if (deferred_.empty()) return std::nullopt;
  const VkDeviceSize size = ctx_.allocator().reserved_size(nbytes);
  const bool dedicated = ctx_.allocator().dedicated_size(size);
  bool barrier_coming = any;
  for (const BufferRange& r : reads) {
    barrier_coming = barrier_coming ||
                     hazards_.conflicts({r.buffer, r.offset, r.offset + r.range, false});
  }
  std::size_t best = deferred_.size();
  for (std::size_t i = 0; i < deferred_.size(); ++i) {
    const Allocation& d = deferred_[i].alloc;
    if (d.dedicated != dedicated || (dedicated ? d.size != size : d.size < size)) continue;
    if (!barrier_coming && hazards_.conflicts({d.buffer, d.offset, d.offset + size, true})) {
      continue;
    }
    if (best == deferred_.size() || d.size < deferred_[best].alloc.size) best = i;
  }
  if (best == deferred_.size()) return std::nullopt;
  Reused out{deferred_[best].alloc, deferred_[best].serial};
  if (out.alloc.size > size) {  // the rest stays deferred, with the same last batch
    Allocation& rest = deferred_[best].alloc;
    rest.offset += size;
    rest.size -= size;
    if (rest.mapped != nullptr) rest.mapped += size;
    if (rest.address != 0) rest.address += size;
    out.alloc.size = size;
  } else {
    deferred_[best] = deferred_.back();
    deferred_.pop_back();
  }
  ++stats_.reused;
  return out;
}

// The program's thread keeps the stream's lock from begin_program to
// end_program: another thread's eager ops or program wait instead of joining
// its command buffer (the lock is recursive, so this thread's own dispatches,
// reads and nested programs go through).
void Stream::begin_program() {
  mu_.lock();
  ++program_depth_;
}

void Stream::end_program() {
  struct Unlock {
    std::recursive_mutex& mu;
    ~Unlock() { mu.unlock(); }
  } unlock{mu_};  // the lock begin_program took, also when submitting throws
  if (program_depth_ > 0) --program_depth_;
  if (program_depth_ == 0) submit_locked();
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
  ++stats_.submits;
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

void Stream::stamp(Batch& b, std::string_view kind) {
  if (b.stamps.size() + 1 >= kQueriesPerBatch) return;
  vkCmdWriteTimestamp(b.cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b.queries,
                      static_cast<std::uint32_t>(b.stamps.size() + 1));
  b.stamps.emplace_back(kind);
}

// After the batch's fence: its timestamps, as differences, into profile_.
void Stream::collect_profile(Batch& b) {
  if (!b.timed || b.stamps.empty()) return;
  ++profiled_batches_;
  const auto n = static_cast<std::uint32_t>(b.stamps.size() + 1);
  std::vector<std::uint64_t> t(n);
  KILN_VK(vkGetQueryPoolResults(ctx_.handle(), b.queries, 0, n, n * sizeof(std::uint64_t),
                                t.data(), sizeof(std::uint64_t),
                                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  const std::uint64_t mask = ctx_.caps().timestamp_mask;
  const double ms_per_tick = ctx_.caps().timestamp_period * 1e-6;
  for (std::uint32_t i = 0; i + 1 < n; ++i) {
    const std::uint64_t ticks = ((t[i + 1] & mask) - (t[i] & mask)) & mask;
    const std::string& kind = b.stamps[i];
    auto it = std::find_if(profile_.begin(), profile_.end(),
                           [&](const KernelTime& k) { return k.kind == kind; });
    if (it == profile_.end()) it = profile_.insert(profile_.end(), KernelTime{kind});
    ++it->dispatches;
    it->ms += static_cast<double>(ticks) * ms_per_tick;
  }
  b.stamps.clear();
}

void Stream::set_profiling(bool on) {
  std::lock_guard lock(mu_);
  profiling_ = on && ctx_.caps().timestamp_period > 0.0;
}

bool Stream::profiling() const {
  std::lock_guard lock(mu_);
  return profiling_;
}

std::vector<KernelTime> Stream::profile() const {
  std::lock_guard lock(mu_);
  std::vector<KernelTime> out = profile_;
  std::stable_sort(out.begin(), out.end(),
                   [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
  return out;
}

void Stream::reset_profile() {
  std::lock_guard lock(mu_);
  profile_.clear();
  profiled_batches_ = 0;
}

std::size_t Stream::profiled_batches() const {
  std::lock_guard lock(mu_);
  return profiled_batches_;
}

std::string Stream::profile_report(bool json) const {
  const std::vector<KernelTime> rows = profile();
  double total = 0.0;
  std::size_t count = 0;
  for (const KernelTime& k : rows) {
    total += k.ms;
    count += k.dispatches;
  }
  const std::string device = ctx_.device().to_string() + " (" + ctx_.name() + ")";
  if (json) {
    std::string s = detail::str_cat("{\"device\": \"", device, "\", \"total_ms\": ", total,
                                    ", \"commands\": ", count, ", \"command_buffers\": ",
                                    profiled_batches(), ", \"kinds\": [");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      s += detail::str_cat(i ? ", " : "", "{\"kind\": \"", rows[i].kind, "\", \"count\": ",
                           rows[i].dispatches, ", \"ms\": ", rows[i].ms, "}");
    }
    return s + "]}";
  }
  std::string s = detail::str_cat("kiln: kernel profile of ", device, ": ", total,
                                  " ms of device time in ", count, " commands, ",
                                  profiled_batches(), " command buffers\n");
  for (const KernelTime& k : rows) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-28s %8zu  %10.3f ms  %5.1f%%  %9.2f us each\n",
                  k.kind.c_str(), k.dispatches, k.ms, total > 0 ? 100.0 * k.ms / total : 0.0,
                  k.dispatches ? 1e3 * k.ms / static_cast<double>(k.dispatches) : 0.0);
    s += line;
  }
  return s;
}

void Stream::retire(Batch& b) {
  collect_profile(b);
  if (!b.checks.empty()) {
    for (const auto& [slot, message] : b.checks) {
      const auto* words = reinterpret_cast<const std::uint32_t*>(faults_[slot]->allocation().mapped);
      if (words[0] != 0 && !fault_) fault_ = message(words[1]);
    }
    b.checks.clear();
  }
  KILN_VK(vkResetFences(ctx_.handle(), 1, &b.fence));
  KILN_VK(vkResetCommandBuffer(b.cmd, 0));
  for (std::size_t i = 0; i < b.pools.size() && i <= b.pool; ++i) {
    KILN_VK(vkResetDescriptorPool(ctx_.handle(), b.pools[i], 0));
  }
  b.pool = 0;
  b.sets_in_pool = 0;
  for (const auto& s : b.staging) ctx_.allocator().free(s);
  b.staging.clear();
  for (VkBufferView v : b.views) vkDestroyBufferView(ctx_.handle(), v, nullptr);
  b.views.clear();
  b.pipelines.clear();
  b.dispatches = 0;
  // Batches retire in the order they were submitted (one queue, FIFO).
  retired_serial_ = b.serial;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < deferred_.size(); ++i) {
    if (deferred_[i].serial <= retired_serial_) {
      ctx_.allocator().free(deferred_[i].alloc);
    } else {
      deferred_[kept++] = deferred_[i];
    }
  }
  deferred_.resize(kept);
}

void Stream::retire_oldest() {
  Batch& b = *in_flight_.front();
  KILN_VK(vkWaitForFences(ctx_.handle(), 1, &b.fence, VK_TRUE, UINT64_MAX));
  auto done = std::move(in_flight_.front());
  in_flight_.pop_front();
  retire(*done);
  spare_.push_back(std::move(done));
}

void Stream::wait_locked(bool all) {
  while (!in_flight_.empty()) {
    retire_oldest();
    if (!all) break;
  }
  check_messages();
  if (fault_) {
    const std::string what = *std::exchange(fault_, std::nullopt);
    throw IndexError(what);
  }
}

void Stream::drop_own_buffers() {
  std::lock_guard lock(mu_);
  faults_.clear();  // back to the allocator now or when their last batch retires
}

std::size_t Stream::own_buffers() const {
  std::lock_guard lock(mu_);
  return static_cast<std::size_t>(
      std::count_if(faults_.begin(), faults_.end(), [](const auto& f) { return f != nullptr; }));
}

std::shared_ptr<VulkanBuffer> Stream::add_check(std::function<std::string(std::uint32_t)> message) {
  std::lock_guard lock(mu_);
  if (faults_.empty()) {
    faults_.resize(kFaultSlots);
    fault_owner_.assign(kFaultSlots, 0);
  }
  Batch& b = open();
  const std::uint32_t slot = next_fault_;
  if (fault_owner_[slot] == b.serial) return nullptr;  // all taken by this batch
  // A batch still in flight with this slot: wait for it (only after 1024 checks).
  while (fault_owner_[slot] > retired_serial_ && !in_flight_.empty()) retire_oldest();
  if (!faults_[slot]) {
    const std::size_t bytes = 2 * sizeof(std::uint32_t);
    faults_[slot] = std::make_shared<VulkanBuffer>(ctx_, ctx_.allocator().allocate_staging(bytes), bytes);
  }
  next_fault_ = (slot + 1) % kFaultSlots;
  fault_owner_[slot] = b.serial;
  auto* words = reinterpret_cast<std::uint32_t*>(faults_[slot]->allocation().mapped);
  words[0] = 0;  // host writes before the batch's vkQueueSubmit
  words[1] = 0;
  b.checks.emplace_back(slot, std::move(message));
  return faults_[slot];
}

void Stream::flush() {
  check_not_forked();
  std::lock_guard lock(mu_);
  submit_locked();
}

void Stream::synchronize() {
  check_not_forked();
  std::lock_guard lock(mu_);
  submit_locked();
  wait_locked(true);
}

StreamStats Stream::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace kiln::vk

namespace kiln::vulkan {
namespace {
vk::Stream& stream_of(Device device, const char* op) {
  if (device.kind != Device::Kind::kVulkan) {
    throw DeviceError(detail::str_cat("[vulkan.", op, "] ", device.to_string(),
                                      " is not a Vulkan device"));
  }
  return vk::Context::get(device.index).stream();
}
}  // namespace

void set_profiling(Device device, bool on) { stream_of(device, "set_profiling").set_profiling(on); }
bool profiling(Device device) { return stream_of(device, "profiling").profiling(); }
std::vector<KernelTime> profile(Device device) { return stream_of(device, "profile").profile(); }
void reset_profile(Device device) { stream_of(device, "reset_profile").reset_profile(); }
std::string profile_report(Device device, bool json) {
  return stream_of(device, "profile_report").profile_report(json);
}

}  // namespace kiln::vulkan
