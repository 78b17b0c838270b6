// Compiled kernels. A kernel is identified by its SPIR-V assembly text (the
// canonical form: equal kernels share one pipeline, whatever op sequence made
// them); lookups go through a cheap key the lowering computes first, so a hit
// costs one hash-map probe and no text is built; a compiled program's fused
// kernels keep their launches (KeptLaunch, kernels.hpp) and skip even that while
// the pipeline stays cached (touch). On disk (disk_cache.hpp) each
// kernel's validated SPIR-V is stored under a stable hash of its text (the text is
// stored too and compared, so a hash collision is a miss, never a wrong kernel),
// and the driver's VkPipelineCache data under "pipeline".
#pragma once

#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "kiln/backends/vulkan/disk_cache.hpp"

namespace kiln::vk {

class Context;

struct KernelSource {
  std::string text;         // SPIR-V assembly
  std::uint32_t bindings = 0;
  std::uint32_t push_words = 0;
  // Bit i: binding i is a uniform texel buffer, bound as a view of the array in
  // `texel_format` (spv::Builder::texel_buffer4); the others are storage buffers.
  std::uint32_t texel = 0;
  VkFormat texel_format = VK_FORMAT_UNDEFINED;
  // Bit i: binding i is addressed (spv::Builder's `addressed`); the stream pushes
  // its device address after the push words.
  std::uint32_t addressed = 0;
};

// A compiled kernel. Shared: the cache holds it while it is cached, and each
// batch of the stream that dispatches it holds it until that batch retires, so
// evicting it from the cache never destroys a pipeline the device may still run.
struct Pipeline : std::enable_shared_from_this<Pipeline> {
  Pipeline() = default;
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  ~Pipeline();  // destroys pipeline and layout (set_layout belongs to the cache)
  VkDevice device = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  std::uint32_t bindings = 0;
  std::uint32_t push_words = 0;
  std::uint32_t texel = 0;  // KernelSource::texel
  VkFormat texel_format = VK_FORMAT_UNDEFINED;
  std::uint32_t addressed = 0;  // KernelSource::addressed
  std::string text;
  std::string kind;  // its key's first fields (kernel_kind): the profile's rows
  // Cache bookkeeping: the lowering keys that map to it (under PipelineCache's
  // lock), when a lookup last returned it, and whether the cache still holds
  // it (cleared when it is evicted; a kept reference, PipelineCache::touch,
  // then looks the kernel up again).
  std::vector<std::string> keys;
  mutable std::atomic<std::uint64_t> last_used{0};
  std::atomic<bool> cached{true};
};

// A kernel key's kind, for the profile: its text up to the second '|' field or
// the first character that starts a parameter ("matmul|f32|T=..." -> "matmul|f32",
// "map|fused{..." -> "map|fused").
std::string kernel_kind(std::string_view key);

struct PipelineStats {
  std::size_t pipelines = 0;     // distinct kernels compiled
  std::size_t keys = 0;          // lowering keys seen
  std::size_t text_hits = 0;     // keys that found an equal kernel already built
  std::size_t disk_hits = 0;     // kernels whose SPIR-V came from the disk cache
  std::size_t disk_rejects = 0;  // disk entries that verified but held bad SPIR-V
  double compile_seconds = 0.0;  // assemble + validate + vkCreateComputePipelines
  std::size_t cached = 0;        // pipelines held now (at most the limit)
  std::size_t evicted = 0;       // dropped as least recently used past the limit
  std::size_t lookups = 0;       // get() calls: a key built and looked up (hit or miss)
  std::size_t kept_hits = 0;     // touch() calls that found a kept pipeline still cached
};

// Bounded: past `limit()` pipelines (KILN_VK_MAX_PIPELINES, default 512, at
// least 64) the least recently used is evicted, so a process that compiles
// ever new shapes does not grow without bound (lavapipe: ~1.4 MB a pipeline).
class PipelineCache {
 public:
  explicit PipelineCache(Context& ctx);
  ~PipelineCache();
  // The pipeline for `key`, building the kernel source with `build` on a miss.
  // The reference stays valid until `limit()` other kernels are compiled (a
  // caller dispatches it right away; the dispatch then holds it).
  const Pipeline& get(const std::string& key,
                      const std::function<KernelSource()>& build);
  // The pipeline built for `key`, or nullptr (builds nothing).
  const Pipeline* find(const std::string& key) const;
  // For a caller that keeps a pipeline it got from get() (KeptLaunch,
  // kernels.hpp) and holds it (a shared_ptr from a weak reference): true, and
  // counted as a use for the LRU order, while the cache still holds it; false
  // once it was evicted (the caller then goes through get() again, so kept
  // references never keep more than `limit()` pipelines in use). No lock.
  bool touch(const Pipeline& p) const;
  PipelineStats stats() const;
  std::size_t limit() const { return limit_; }
  // Writes the VkPipelineCache data to the disk cache (also done at exit).
  void save();

 private:
  Pipeline& compile(const std::string& key, const KernelSource& src);
  // Drops the least recently used pipeline other than `keep` (mu_ held).
  void evict_one(const Pipeline* keep);
  VkDescriptorSetLayout set_layout(std::uint32_t bindings, std::uint32_t texel);
  std::vector<std::uint32_t> spirv_for(const std::string& text);

  Context& ctx_;
  mutable std::mutex mu_;
  VkPipelineCache vk_cache_ = VK_NULL_HANDLE;
  std::unique_ptr<DiskCache> disk_;  // null when disabled (KILN_DISK_CACHE=0)
  bool dirty_ = false;               // pipelines compiled since the last save
  const std::size_t limit_;
  mutable std::atomic<std::uint64_t> clock_{0};  // lookups so far (last_used)
  mutable std::atomic<std::size_t> kept_hits_{0};
  absl::flat_hash_map<std::string, Pipeline*> by_key_;
  absl::flat_hash_map<std::string, std::shared_ptr<Pipeline>> by_text_;
  absl::flat_hash_map<std::uint64_t, VkDescriptorSetLayout> set_layouts_;
  PipelineStats stats_;
};

}  // namespace kiln::vk
