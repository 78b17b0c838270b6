// Host buffers and the cache of freed host blocks.
//
// Why a cache: a fresh allocation of more than a few hundred KiB comes from mmap,
// and every page of it faults on first write. For an elementwise op over 64 MiB that
// costs as much as the op itself (measured in bench/: 7 GB/s with fresh outputs
// against 30 GB/s for memcpy into warm pages). Training loops allocate the same
// sizes step after step, so freed blocks are kept by exact (64-byte rounded) size
// and handed out again, warm. The cache holds at most kMaxCachedBytes;
// KILN_HOST_CACHE=0 turns it off (e.g. to find leaks with ASan).
#include "kiln/runtime/buffer.hpp"

#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

constexpr std::size_t kAlign = 64;
constexpr std::size_t kMaxCachedBytes = std::size_t{1} << 30;

class HostCache {
 public:
  static HostCache& get() {
    static HostCache* cache = new HostCache;  // leaked: outlives static arrays
    return *cache;
  }

  void* take(std::size_t bytes) {
    if (!enabled_) return nullptr;
    std::lock_guard lock(mu_);
    auto it = free_.find(bytes);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= bytes;
    return p;
  }

  // Keeps `p` for reuse, or frees it when the cache is full or off.
  void give(void* p, std::size_t bytes) {
    if (enabled_) {
      std::lock_guard lock(mu_);
      if (cached_ + bytes <= kMaxCachedBytes) {
        free_[bytes].push_back(p);
        cached_ += bytes;
        return;
      }
    }
    std::free(p);
  }

  std::size_t cached_bytes() {
    std::lock_guard lock(mu_);
    return cached_;
  }

  void clear() {
    std::lock_guard lock(mu_);
    for (auto& [bytes, blocks] : free_) {
      for (void* p : blocks) std::free(p);
    }
    free_.clear();
    cached_ = 0;
  }

 private:
  HostCache() {
    enabled_ = detail::env::flag("KILN_HOST_CACHE").value_or(true);
  }

  bool enabled_;
  std::mutex mu_;
  absl::flat_hash_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
};

// "12884901888 bytes (12 GiB)".
std::string bytes_text(std::uint64_t n) {
  const double gib = static_cast<double>(n) / static_cast<double>(1ull << 30);
  return detail::str_cat(n, " bytes (", gib >= 0.1 ? detail::str_cat(static_cast<long long>(gib * 10 + 0.5) / 10.0, " GiB")
                                                   : detail::str_cat((n + 1023) / 1024, " KiB"),
                         ")");
}

// Physical memory the system reports free for new allocations (0 if unknown).
std::uint64_t available_host_bytes() {
  const long pages = ::sysconf(_SC_AVPHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
                               : 0;
}

}  // namespace

void trim_host_memory() {
  HostCache::get().clear();
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

std::shared_ptr<HostBuffer> HostBuffer::allocate(std::size_t nbytes,
                                                 bool zero) {
  const std::size_t rounded = ((nbytes + kAlign - 1) / kAlign) * kAlign;
  void* p = nullptr;
  if (rounded != 0) {
    p = HostCache::get().take(rounded);
    if (p == nullptr) p = std::aligned_alloc(kAlign, rounded);
    if (p == nullptr) {
      HostCache::get().clear();  // give cached blocks back, then retry once
      p = std::aligned_alloc(kAlign, rounded);
    }
    if (p == nullptr) {
      throw OutOfMemoryError(detail::str_cat(
          "[cpu] out of host memory: asked for ", bytes_text(nbytes), ", the system has ",
          bytes_text(available_host_bytes()),
          " free; nothing was changed (use smaller batches or arrays)"));
    }
  }
  if (zero && p) std::memset(p, 0, rounded);
  return std::shared_ptr<HostBuffer>(new HostBuffer(p, nbytes));
}

HostBuffer::~HostBuffer() {
  if (data_) HostCache::get().give(data_, ((nbytes_ + kAlign - 1) / kAlign) * kAlign);
}

void HostBuffer::read(void* dst) const {
  if (nbytes_) std::memcpy(dst, data_, nbytes_);
}

std::size_t host_cache_bytes() { return HostCache::get().cached_bytes(); }
void clear_host_cache() { HostCache::get().clear(); }

}  // namespace kiln
