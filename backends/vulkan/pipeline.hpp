// Compiled kernels. A kernel is identified by its SPIR-V assembly text (the
// canonical form: equal kernels share one pipeline, whatever op sequence made
// them); lookups go through a cheap key the lowering computes first, so a hit
// costs one hash-map probe and no text is built. On disk (disk_cache.hpp) each
// kernel's validated SPIR-V is stored under a stable hash of its text (the text is
// stored too and compared, so a hash collision is a miss, never a wrong kernel),
// and the driver's VkPipelineCache data under "pipeline".
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
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

struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  std::uint32_t bindings = 0;
  std::uint32_t push_words = 0;
  std::uint32_t texel = 0;  // KernelSource::texel
  VkFormat texel_format = VK_FORMAT_UNDEFINED;
  std::uint32_t addressed = 0;  // KernelSource::addressed
  std::string text;
};

struct PipelineStats {
  std::size_t pipelines = 0;     // distinct kernels compiled
  std::size_t keys = 0;          // lowering keys seen
  std::size_t text_hits = 0;     // keys that found an equal kernel already built
  std::size_t disk_hits = 0;     // kernels whose SPIR-V came from the disk cache
  std::size_t disk_rejects = 0;  // disk entries that verified but held bad SPIR-V
  double compile_seconds = 0.0;  // assemble + validate + vkCreateComputePipelines
};

class PipelineCache {
 public:
  explicit PipelineCache(Context& ctx);
  ~PipelineCache();
  // The pipeline for `key`, building the kernel source with `build` on a miss.
  const Pipeline& get(const std::string& key,
                      const std::function<KernelSource()>& build);
  // The pipeline built for `key`, or nullptr (builds nothing).
  const Pipeline* find(const std::string& key) const;
  PipelineStats stats() const;
  // Writes the VkPipelineCache data to the disk cache (also done at exit).
  void save();

 private:
  const Pipeline& compile(const std::string& key, const KernelSource& src);
  VkDescriptorSetLayout set_layout(std::uint32_t bindings, std::uint32_t texel);
  std::vector<std::uint32_t> spirv_for(const std::string& text);

  Context& ctx_;
  mutable std::mutex mu_;
  VkPipelineCache vk_cache_ = VK_NULL_HANDLE;
  std::unique_ptr<DiskCache> disk_;  // null when disabled (KILN_DISK_CACHE=0)
  bool dirty_ = false;               // pipelines compiled since the last save
  absl::flat_hash_map<std::string, const Pipeline*> by_key_;
  absl::flat_hash_map<std::string, std::unique_ptr<Pipeline>> by_text_;
  absl::flat_hash_map<std::uint64_t, VkDescriptorSetLayout> set_layouts_;
  PipelineStats stats_;
};

}  // namespace kiln::vk
