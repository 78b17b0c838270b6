// Kernel text -> SPIR-V (SPIRV-Tools) -> VkPipeline, cached by key and by text.
#include "kiln/backends/vulkan/pipeline.hpp"

#include <bit>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <optional>
#include <string_view>

#include "kiln/backends/vulkan/check.hpp"
#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/spirv.hpp"
#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {
// KILN_VK_PRINT_KERNELS=1 prints each kernel's SPIR-V assembly as it is compiled.
bool print_kernels() { return detail::env::flag("KILN_VK_PRINT_KERNELS").value_or(false); }

bool optimize_kernels() {
  // spirv-opt's performance passes; KILN_VK_OPTIMIZE=0 turns them off.
  return detail::env::flag("KILN_VK_OPTIMIZE").value_or(true);
}

// FNV-1a, 64-bit: stable across processes and builds (absl::Hash is seeded).
std::uint64_t stable_hash(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

constexpr std::size_t kDefaultPipelineLimit = 512;
constexpr std::size_t kMinPipelineLimit = 64;

std::size_t pipeline_limit() {
  // The table's minimum is kMinPipelineLimit (runtime/env.cpp).
  return static_cast<std::size_t>(
      detail::env::count("KILN_VK_MAX_PIPELINES").value_or(kDefaultPipelineLimit));
}

std::mutex g_caches_mu;
std::vector<PipelineCache*>& all_caches() {
  static auto* v = new std::vector<PipelineCache*>();
  return *v;
}
void save_all_at_exit() {
  std::lock_guard lock(g_caches_mu);
  for (PipelineCache* c : all_caches()) c->save();
}

}  // namespace

Pipeline::~Pipeline() {
  if (device == VK_NULL_HANDLE) return;
  vkDestroyPipeline(device, pipeline, nullptr);
  vkDestroyPipelineLayout(device, layout, nullptr);
}

PipelineCache::PipelineCache(Context& ctx) : ctx_(ctx), limit_(pipeline_limit()) {
  const auto& props = ctx.properties();
  CacheProvenance prov;
  prov.vendor_id = props.vendorID;
  prov.device_id = props.deviceID;
  prov.driver_version = props.driverVersion;
  std::memcpy(prov.pipeline_cache_uuid.data(), props.pipelineCacheUUID, VK_UUID_SIZE);
  if (auto dir = DiskCache::default_dir()) {
    disk_ = std::make_unique<DiskCache>(*dir, prov);
  }
  std::optional<std::vector<std::uint8_t>> data;
  if (disk_ && !ctx.quirks().pipeline_cache_header_only) data = disk_->load("pipeline", 0);
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  if (data) {  // the driver checks its own header and ignores data it cannot use
    ci.initialDataSize = data->size();
    ci.pInitialData = data->data();
  }
  KILN_VK(vkCreatePipelineCache(ctx.handle(), &ci, nullptr, &vk_cache_));
  std::lock_guard lock(g_caches_mu);
  if (all_caches().empty()) std::atexit(save_all_at_exit);
  all_caches().push_back(this);
}

// Only for a released device (Context::~Context); other caches are saved at exit.
PipelineCache::~PipelineCache() {
  save();
  {
    std::lock_guard lock(g_caches_mu);
    std::erase(all_caches(), this);
  }
  const VkDevice dev = ctx_.handle();
  by_key_.clear();
  for (const auto& [text, p] : by_text_) p->cached.store(false, std::memory_order_release);
  by_text_.clear();  // the stream released its batches' pipelines before
  for (const auto& [bindings, layout] : set_layouts_) {
    vkDestroyDescriptorSetLayout(dev, layout, nullptr);
  }
  vkDestroyPipelineCache(dev, vk_cache_, nullptr);
}

void PipelineCache::save() {
  std::lock_guard lock(mu_);
  if (!disk_ || !dirty_ || ctx_.quirks().pipeline_cache_header_only) return;
  std::size_t size = 0;
  if (vkGetPipelineCacheData(ctx_.handle(), vk_cache_, &size, nullptr) != VK_SUCCESS) return;
  std::vector<std::uint8_t> data(size);
  if (vkGetPipelineCacheData(ctx_.handle(), vk_cache_, &size, data.data()) != VK_SUCCESS) return;
  data.resize(size);
  disk_->store("pipeline", 0, data);
  dirty_ = false;
}

// Validated SPIR-V for `text`: from the disk cache, else assembled, validated,
// optimized and stored (payload: encode_spirv_payload, disk_cache.hpp). A
// cached entry is validated again: its checksum only proves that the bytes are
// the ones written, and invalid SPIR-V handed to the driver failed every op
// that used the kernel, in every later run. Such an entry is rebuilt and
// replaced, with a warning.
std::vector<std::uint32_t> PipelineCache::spirv_for(const std::string& text) {
  const std::uint64_t key = stable_hash(text);
  if (disk_) {
    if (auto hit = disk_->load("spirv", key)) {
      auto words = decode_spirv_payload(*hit, text);
      if (words && spv::valid(*words)) {
        ++stats_.disk_hits;
        return *std::move(words);
      }
      ++stats_.disk_rejects;
      const std::string line = detail::str_cat(
          "kiln: warning: [disk_cache] ", disk_->path_for("spirv", key).string(),
          words ? " holds SPIR-V that fails validation" : " is not this kernel's SPIR-V",
          "; rebuilding it\n");
      std::fwrite(line.data(), 1, line.size(), stderr);
    }
  }
  std::vector<std::uint32_t> words = spv::assemble(text, optimize_kernels());
  if (disk_) {
    disk_->store("spirv", key, encode_spirv_payload(text, words));
  }
  return words;
}

VkDescriptorSetLayout PipelineCache::set_layout(std::uint32_t bindings, std::uint32_t texel) {
  const std::uint64_t key = bindings | std::uint64_t{texel} << 32;
  auto it = set_layouts_.find(key);
  if (it != set_layouts_.end()) return it->second;
  std::vector<VkDescriptorSetLayoutBinding> b(bindings);
  for (std::uint32_t i = 0; i < bindings; ++i) {
    b[i].binding = i;
    b[i].descriptorType = ((texel >> i) & 1u) != 0 ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
                                                   : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[i].descriptorCount = 1;
    b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  if (ctx_.caps().push_descriptor) {
    ci.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
  }
  ci.bindingCount = bindings;
  ci.pBindings = b.data();
  VkDescriptorSetLayout layout;
  KILN_VK(vkCreateDescriptorSetLayout(ctx_.handle(), &ci, nullptr, &layout));
  set_layouts_.emplace(key, layout);
  return layout;
}

std::string kernel_kind(std::string_view key) {
  std::size_t end = 0;
  int fields = 0;
  for (; end < key.size(); ++end) {
    const char c = key[end];
    if (c == '|') {
      if (++fields == 2) break;
    } else if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') {
      break;
    }
  }
  // A field that is a parameter ("|n=8") is not part of the kind.
  if (end < key.size() && key[end] == '=') {
    const std::size_t bar = key.rfind('|', end);
    if (bar != std::string_view::npos) end = bar;
  }
  while (end > 0 && key[end - 1] == '|') --end;
  return std::string(key.substr(0, end));
}

Pipeline& PipelineCache::compile(const std::string& key, const KernelSource& given) {
  KernelSource src = given;
  src.text = spv::preserve_special_floats(given.text, ctx_.caps().preserve_float_widths);
  auto it = by_text_.find(src.text);
  if (it != by_text_.end()) {
    ++stats_.text_hits;
    return *it->second;
  }
  if (print_kernels()) {
    std::fprintf(stderr, "kiln: kernel for %s on %s\n%s\n", key.c_str(),
                 ctx_.device().to_string().c_str(), src.text.c_str());
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::uint32_t> words = spirv_for(src.text);
  auto p = std::make_shared<Pipeline>();
  p->bindings = src.bindings;
  p->push_words = src.push_words;
  p->texel = src.texel;
  p->texel_format = src.texel_format;
  p->text = src.text;
  p->kind = kernel_kind(key);
  p->set_layout = set_layout(src.bindings, src.texel);
  p->addressed = src.addressed;
  const std::uint32_t push_words =
      src.addressed == 0 ? src.push_words
                         : spv::address_word(src.push_words) + 2 * static_cast<std::uint32_t>(
                                                                      std::popcount(src.addressed));
  if (4 * push_words > ctx_.caps().max_push_constants_size) {
    throw DeviceError(detail::str_cat(
        "[vulkan] kernel ", key, " reads ", std::popcount(src.addressed),
        " arrays larger than maxStorageBufferRange through their device addresses; the "
        "push constants of ", ctx_.device().to_string(), " (",
        ctx_.caps().max_push_constants_size, " bytes) hold fewer"));
  }
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, 4 * push_words};
  VkPipelineLayoutCreateInfo li{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  li.setLayoutCount = 1;
  li.pSetLayouts = &p->set_layout;
  li.pushConstantRangeCount = push_words > 0 ? 1 : 0;
  li.pPushConstantRanges = &range;
  KILN_VK(vkCreatePipelineLayout(ctx_.handle(), &li, nullptr, &p->layout));
  p->device = ctx_.handle();  // from here on ~Pipeline destroys what was made
  VkShaderModuleCreateInfo si{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  si.codeSize = words.size() * sizeof(std::uint32_t);
  si.pCode = words.data();
  VkShaderModule module;
  KILN_VK(vkCreateShaderModule(ctx_.handle(), &si, nullptr, &module));
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.layout = p->layout;
  const VkResult r =
      vkCreateComputePipelines(ctx_.handle(), vk_cache_, 1, &ci, nullptr, &p->pipeline);
  vkDestroyShaderModule(ctx_.handle(), module, nullptr);
  if (r != VK_SUCCESS) p->pipeline = VK_NULL_HANDLE;
  KILN_VK(r);
  stats_.compile_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++stats_.pipelines;
  dirty_ = true;
  Pipeline& ref = *p;
  by_text_.emplace(src.text, std::move(p));
  return ref;
}

void PipelineCache::evict_one(const Pipeline* keep) {
  auto victim = by_text_.end();
  for (auto it = by_text_.begin(); it != by_text_.end(); ++it) {
    if (it->second.get() == keep) continue;
    if (victim == by_text_.end() || it->second->last_used.load(std::memory_order_relaxed) <
                                        victim->second->last_used.load(std::memory_order_relaxed)) {
      victim = it;
    }
  }
  if (victim == by_text_.end()) return;
  for (const std::string& k : victim->second->keys) by_key_.erase(k);
  victim->second->cached.store(false, std::memory_order_release);
  by_text_.erase(victim);  // destroyed now, or when the last batch using it retires
  ++stats_.evicted;
}

namespace {

// KILN_VK_CHECK_KEYS=1 (the Vulkan test suites set it): every key hit builds
// the kernel again and requires the same source, so a lowering key that misses
// something the kernel's code depends on (a parameter, a dtype, a view) fails
// the first test that uses two such kernels, instead of silently running the
// wrong pipeline.
bool check_keys() {
  static const bool on = detail::env::flag("KILN_VK_CHECK_KEYS").value_or(false);
  return on;
}

// The first line where two kernel texts differ, for the message.
std::string first_difference(std::string_view a, std::string_view b) {
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) break;
    if (a[i] == '\n') line_start = i + 1;
  }
  auto line = [&](std::string_view s) {
    const std::size_t end = s.find('\n', line_start);
    return std::string(s.substr(std::min(line_start, s.size()), end == std::string_view::npos ? std::string_view::npos : end - line_start));
  };
  return detail::str_cat("'", line(a), "' vs '", line(b), "'");
}

}  // namespace

const Pipeline& PipelineCache::get(const std::string& key,
                                   const std::function<KernelSource()>& build) {
  std::lock_guard lock(mu_);
  auto it = by_key_.find(key);
  if (it != by_key_.end()) {
    if (check_keys()) {
      KernelSource again = build();
      again.text = spv::preserve_special_floats(again.text, ctx_.caps().preserve_float_widths);
      const Pipeline& p = *it->second;
      if (again.text != p.text || again.bindings != p.bindings ||
          again.push_words != p.push_words || again.texel != p.texel ||
          again.texel_format != p.texel_format || again.addressed != p.addressed) {
        throw Error(detail::str_cat("[vulkan] the kernel key \"", key,
                                    "\" is incomplete: two different kernels share it (",
                                    first_difference(p.text, again.text), ")"));
      }
    }
    ++stats_.lookups;
    it->second->last_used.store(++clock_, std::memory_order_relaxed);
    return *it->second;
  }
  ++stats_.lookups;
  Pipeline& p = compile(key, build());
  ++stats_.keys;
  by_key_.emplace(key, &p);
  p.keys.push_back(key);
  p.last_used.store(++clock_, std::memory_order_relaxed);
  while (by_text_.size() > limit_) evict_one(&p);
  return p;
}

const Pipeline* PipelineCache::find(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : it->second;
}

bool PipelineCache::touch(const Pipeline& p) const {
  if (!p.cached.load(std::memory_order_acquire)) return false;
  p.last_used.store(++clock_, std::memory_order_relaxed);
  kept_hits_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

PipelineStats PipelineCache::stats() const {
  std::lock_guard lock(mu_);
  PipelineStats s = stats_;
  s.cached = by_text_.size();
  s.kept_hits = kept_hits_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kiln::vk
